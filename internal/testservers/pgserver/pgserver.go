// Package pgserver starts a real PostgreSQL server from the binaries of the
// Debian package postgresql (and PgBouncer before it, from the package
// pgbouncer), for the tests, demos and fault trials of the packages of this
// repository that need one.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDir holds initdb, postgres and pg_ctl; the environment variable PGBIN
// overrides it.
var BinDir = "/usr/lib/postgresql/15/bin"

// readyTimeout bounds the wait for a new server to accept connections; it
// guards against a hang, it is not a measure: a server is ready in well under
// a second.
const readyTimeout = 30 * time.Second

// Server is a PostgreSQL server started by this process, listening on
// 127.0.0.1 and on a Unix-domain socket in its own temporary folder, with
// the settings of a test (fsync off).
type Server struct {
	dir      string // the temporary folder: data, socket, log
	port     int
	cred     *syscall.Credential // the user the server runs as, nil for this process's
	settings []string            // postgres -c settings beside the tests' own

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Check returns an error naming the package to install if the PostgreSQL
// binaries are missing.
func Check() error {
	dir := bin()
	for _, name := range []string{"initdb", "postgres", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("pgserver: %s not found in %s (set PGBIN to the folder that has it): install the Debian package postgresql (apt-get install postgresql): %w", name, dir, err)
		}
	}
	return nil
}

func bin() string {
	if d := os.Getenv("PGBIN"); d != "" {
		return d
	}
	return BinDir
}

// Start makes a new database cluster in a temporary folder with initdb and
// starts a server on it, on a free loopback port. When this process runs as
// root, which PostgreSQL refuses, the server runs as the user postgres, or
// nobody if there is none. The caller must Close the server.
func Start() (*Server, error) { return StartWith() }

// StartWith is Start with server settings beside the tests' own, each
// "name=value" as postgres -c takes it, such as "max_connections=50"; a
// setting given here wins over the tests' own.
func StartWith(settings ...string) (*Server, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	s, err := newServer("pgserver-", cred)
	if err != nil {
		return nil, err
	}
	s.settings = settings
	dir := s.dir
	if out, err := s.command("initdb", "-D", s.data(), "-U", "postgres", "-A", "trust",
		"--locale=C", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgserver: initdb: %w: %s", err, out)
	}
	if err := s.startOnFreePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// newServer returns a Server, not started, with a new temporary folder
// named from pattern that the server's user owns.
func newServer(pattern string, cred *syscall.Credential) (*Server, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgserver: %w", err)
		}
	}
	return &Server{dir: dir, cred: cred}, nil
}

// startOnFreePort starts the server on a free loopback port, trying another
// if the one found was taken meanwhile.
func (s *Server) startOnFreePort() error {
	for try := 0; ; try++ {
		port, err := freePort()
		if err == nil {
			s.port = port
			err = s.Restart()
		}
		if err == nil || try == 2 {
			return err
		}
	}
}

// StartStandby makes a streaming standby of s in a temporary folder of its
// own, with pg_basebackup -R (which writes the settings that make the copy
// follow s), starts it on a free loopback port and returns once it accepts
// connections: a hot standby serves reads. Advisory locks live in a server's
// memory and are not copied or replicated; tables are. The caller must
// Close the standby.
func (s *Server) StartStandby() (*Server, error) {
	if _, err := os.Stat(filepath.Join(bin(), "pg_basebackup")); err != nil {
		return nil, fmt.Errorf("pgserver: pg_basebackup not found in %s (set PGBIN to the folder that has it): install the Debian package postgresql (apt-get install postgresql): %w", bin(), err)
	}
	st, err := newServer("pgserver-standby-", s.cred)
	if err != nil {
		return nil, err
	}
	dir := st.dir
	if out, err := st.command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres",
		"-D", st.data(), "-R", "-X", "stream", "--no-sync").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgserver: pg_basebackup: %w: %s", err, out)
	}
	if err := st.startOnFreePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return st, nil
}

// Promote ends a standby's recovery with pg_ctl promote and returns once it
// takes writes: the failover of an operator, or of a tool that does it.
func (s *Server) Promote() error {
	out, err := s.command("pg_ctl", "promote", "-D", s.data(), "-w", "-t", "30").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: pg_ctl promote: %w: %s", err, out)
	}
	return nil
}

// credential returns the user the server must run as, nil for this
// process's own.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgserver: running as root, and there is no user postgres or nobody to run the server as")
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// command returns the command that runs the PostgreSQL binary name as the
// server's user.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin(), name), args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

// Restart starts the server again after [Server.Stop], on the same port and
// data, and returns once it accepts connections. Start calls it the first
// time.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("pgserver: the server is running")
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer logf.Close()
	args := []string{"-D", s.data(), "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB",
		"-c", "log_min_messages=fatal", "-c", "log_min_error_statement=panic"}
	for _, kv := range s.settings {
		args = append(args, "-c", kv)
	}
	cmd := s.command("postgres", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// An immediate shutdown if this process dies first: no server outlives
	// the tests.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	exited, err := start(cmd)
	if err != nil {
		return fmt.Errorf("pgserver: start postgres: %w", err)
	}
	s.cmd, s.exited = cmd, exited
	if err := waitReady(s.ConnString(s.Addr()), s.data(), exited); err != nil {
		select {
		case <-exited:
		default:
			cmd.Process.Signal(syscall.SIGQUIT)
			<-exited
		}
		s.cmd = nil
		return fmt.Errorf("pgserver: postgres: %w: %s", err, s.logTail())
	}
	return nil
}

// start starts cmd and returns a channel closed when it has exited.
func start(cmd *exec.Cmd) (exited chan struct{}, err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited = make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	return exited, nil
}

// waitReady returns once a connection through connString reaches the
// server of the data folder data, or an error if the process behind it
// exits first or readyTimeout passes. A server of another test that took
// the port, while this one could not listen on it, is not taken for this
// one.
func waitReady(connString, data string, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, connString)
		if err == nil {
			var dir string
			// The simple protocol: PgBouncer in transaction mode may
			// stand between.
			err = c.QueryRow(ctx, "SHOW data_directory", pgx.QueryExecModeSimpleProtocol).Scan(&dir)
			if err == nil && dir != data {
				err = fmt.Errorf("the server there serves %s, not %s", dir, data)
			}
			c.Close(context.Background())
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// Addr returns the server's TCP address, such as 127.0.0.1:40715.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Socket returns the folder of the server's Unix-domain socket.
func (s *Server) Socket() string { return s.dir }

// ConnString returns the URL of the database postgres as the superuser
// postgres, through addr: the server's Addr, a proxy's, or its Socket.
func (s *Server) ConnString(addr string) string {
	if strings.HasPrefix(addr, "/") {
		return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", addr, s.port)
	}
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr)
}

// Connect returns a new connection through addr (see [Server.ConnString]).
func (s *Server) Connect(ctx context.Context, addr string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, s.ConnString(addr))
}

// PID returns the postmaster's process id, 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop stops the server with pg_ctl stop -m mode (smart, fast or immediate)
// and returns once the postmaster has exited.
func (s *Server) Stop(mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	out, err := s.command("pg_ctl", "stop", "-D", s.data(), "-m", mode, "-w", "-t", "30").CombinedOutput()
	if err != nil {
		s.cmd.Process.Signal(syscall.SIGQUIT)
	}
	<-s.exited
	s.cmd = nil
	if err != nil {
		return fmt.Errorf("pgserver: pg_ctl stop -m %s: %w: %s", mode, err, out)
	}
	return nil
}

// Close stops the server at once if it runs and removes its folder.
func (s *Server) Close() error {
	err := s.Stop("immediate")
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// RequirePassword makes the server ask role for its password
// (scram-sha-256) over TCP and on the Unix-domain socket, by lines put first
// in pg_hba.conf and a reload, and returns once the server refuses role
// without one. Other roles keep trust.
func (s *Server) RequirePassword(role string) error {
	hba := filepath.Join(s.data(), "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	lines := fmt.Sprintf("local all %[1]s scram-sha-256\nhost all %[1]s 0.0.0.0/0 scram-sha-256\nhost all %[1]s ::/0 scram-sha-256\n", role)
	if err := os.WriteFile(hba, append([]byte(lines), old...), 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if out, err := s.command("pg_ctl", "reload", "-D", s.data()).CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: pg_ctl reload: %w: %s", err, out)
	}
	deadline := time.Now().Add(readyTimeout)
	url := fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", role, s.Addr())
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, url)
		cancel()
		if err == nil {
			c.Close(context.Background())
		} else if strings.Contains(err.Error(), "28P01") || strings.Contains(err.Error(), "password") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgserver: the server still lets %s in without a password %v after the reload", role, readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
