package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// BouncerBin is the PgBouncer binary; the environment variable PGBOUNCER
// overrides it.
var BouncerBin = "/usr/sbin/pgbouncer"

func bouncerBin() string {
	if b := os.Getenv("PGBOUNCER"); b != "" {
		return b
	}
	return BouncerBin
}

// CheckBouncer returns an error naming the package to install if PgBouncer
// is missing.
func CheckBouncer() error {
	if _, err := os.Stat(bouncerBin()); err != nil {
		return fmt.Errorf("pgtest: %s not found (set PGBOUNCER to its path): install the Debian package pgbouncer (apt-get install pgbouncer): %w", bouncerBin(), err)
	}
	return nil
}

// Bouncer is a PgBouncer started by this process in front of a [Server],
// on a loopback port, with its configuration and log in a temporary folder
// of its own. It lets in every user of the server without a password.
type Bouncer struct {
	dir  string
	port int
	srv  *Server

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartBouncer starts a PgBouncer in front of s with pool_mode mode
// (session, transaction or statement) and poolSize server connections per
// user and database, and returns once it accepts connections. It runs as
// the server's user: PgBouncer refuses to run as root. The caller must
// Close it.
func (s *Server) StartBouncer(mode string, poolSize int) (*Bouncer, error) {
	if err := CheckBouncer(); err != nil {
		return nil, err
	}
	tmp, err := newServer("pgtest-bouncer-", s.cred)
	if err != nil {
		return nil, err
	}
	b := &Bouncer{dir: tmp.dir, srv: s}
	if err := os.WriteFile(filepath.Join(b.dir, "users.txt"), []byte(`"postgres" ""`+"\n"+`"slow" ""`+"\n"), 0o644); err != nil {
		os.RemoveAll(b.dir)
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	for try := 0; ; try++ {
		port, err := freePort()
		if err == nil {
			b.port = port
			err = b.start(mode, poolSize)
		}
		if err == nil {
			return b, nil
		}
		if try == 2 {
			os.RemoveAll(b.dir)
			return nil, err
		}
	}
}

func (b *Bouncer) start(mode string, poolSize int) error {
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = postgres
pool_mode = %s
default_pool_size = %d
max_client_conn = 200
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits
logfile = %s
`, b.srv.port, b.port, filepath.Join(b.dir, "users.txt"), mode, poolSize, filepath.Join(b.dir, "log"))
	conf := filepath.Join(b.dir, "pgbouncer.ini")
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	cmd := exec.Command(bouncerBin(), conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.srv.cred, Pdeathsig: syscall.SIGKILL}
	exited, err := start(cmd)
	if err != nil {
		return fmt.Errorf("pgtest: start pgbouncer: %w", err)
	}
	b.mu.Lock()
	b.cmd, b.exited = cmd, exited
	b.mu.Unlock()
	if err := waitReady(b.srv.ConnString(b.Addr()), b.srv.data(), exited); err != nil {
		log, _ := os.ReadFile(filepath.Join(b.dir, "log"))
		b.stop()
		return fmt.Errorf("pgtest: pgbouncer: %w: %s", err, log)
	}
	return nil
}

// Addr returns the PgBouncer's TCP address.
func (b *Bouncer) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.port) }

// Admin runs command on the PgBouncer's admin console (the database
// pgbouncer), such as "KILL postgres", which closes at once every client
// and server connection of the database postgres.
func (b *Bouncer) Admin(ctx context.Context, command string) error {
	c, err := pgx.Connect(ctx, "postgres://postgres@"+b.Addr()+"/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol")
	if err != nil {
		return fmt.Errorf("pgtest: pgbouncer's admin console: %w", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, command); err != nil {
		return fmt.Errorf("pgtest: pgbouncer's admin console: %s: %w", command, err)
	}
	return nil
}

// PID returns the PgBouncer's process id, 0 if it is not running.
func (b *Bouncer) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Close stops the PgBouncer at once (SIGKILL, which also ends a stopped
// one) and removes its folder. Successive calls do nothing.
func (b *Bouncer) Close() error {
	err := b.stop()
	if rerr := os.RemoveAll(b.dir); err == nil {
		err = rerr
	}
	return err
}

// stop kills the PgBouncer if it runs and waits for it to exit.
func (b *Bouncer) stop() error {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return nil
	}
	var err error
	if kerr := cmd.Process.Kill(); kerr != nil && !errors.Is(kerr, os.ErrProcessDone) {
		err = fmt.Errorf("pgtest: kill pgbouncer: %w", kerr)
	}
	<-exited
	return err
}
