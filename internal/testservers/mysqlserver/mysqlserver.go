// Package mysqlserver starts real MariaDB servers from the binaries of the
// Debian package mariadb-server, for the tests, demos and fault trials of
// the packages of this repository that need one.
package mysqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The binaries; the environment variables MARIADBD and MARIADB_INSTALL_DB
// override them.
var (
	ServerBin  = "/usr/sbin/mariadbd"
	InstallBin = "/usr/bin/mariadb-install-db"
)

// readyTimeout bounds the wait for a server to accept connections, and for
// a replica to catch up; it guards against a hang, it is not a measure: a
// server is ready in about a second.
const readyTimeout = 60 * time.Second

func serverBin() string  { return env("MARIADBD", ServerBin) }
func installBin() string { return env("MARIADB_INSTALL_DB", InstallBin) }

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Check returns an error naming the package to install if the MariaDB
// binaries are missing.
func Check() error {
	for _, b := range []string{serverBin(), installBin()} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("mysqlserver: %s not found (set MARIADBD and MARIADB_INSTALL_DB to the paths of mariadbd and mariadb-install-db): install the Debian package mariadb-server (apt-get install mariadb-server): %w", b, err)
		}
	}
	return nil
}

// Server is a MariaDB server started by this process in a temporary folder
// of its own, listening on a free loopback port, with a binary log (so that
// a replica can follow it) and the user root@127.0.0.1 without a password.
type Server struct {
	dir      string
	port     int
	serverID int
	readOnly bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start makes a new data folder with mariadb-install-db and starts a server
// on it. The caller must Close it.
func Start() (*Server, error) { return start(1, false) }

func start(serverID int, readOnly bool) (*Server, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mysqlserver-")
	if err != nil {
		return nil, fmt.Errorf("mysqlserver: %w", err)
	}
	s := &Server{dir: dir, serverID: serverID, readOnly: readOnly}
	// Each server has a temporary folder of its own: a starting mariadbd
	// (mariadb-install-db's bootstrap too) removes the files named #sql* it
	// finds in its tmpdir, which in a shared /tmp are another server's
	// temporary tables. Two install-dbs at once in /tmp failed 3 times in 8.
	if err := os.Mkdir(s.tmp(), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mysqlserver: %w", err)
	}
	args := []string{"--no-defaults", "--datadir=" + s.data(), "--tmpdir=" + s.tmp(), "--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	if out, err := exec.Command(installBin(), args...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mysqlserver: mariadb-install-db: %w: %s", err, out)
	}
	for try := 0; ; try++ {
		port, err := freePort()
		if err == nil {
			s.port = port
			err = s.Restart()
		}
		if err == nil {
			return s, nil
		}
		if try == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }
func (s *Server) tmp() string  { return filepath.Join(s.dir, "tmp") }

// Restart starts the server again after [Server.Stop] or [Server.Kill], on
// the same port and data, and returns once it accepts connections.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("mysqlserver: the server is running")
	}
	args := []string{"--no-defaults",
		"--datadir=" + s.data(), "--tmpdir=" + s.tmp(), "--socket=" + filepath.Join(s.dir, "sock"),
		"--pid-file=" + filepath.Join(s.dir, "pid"), "--log-error=" + filepath.Join(s.dir, "log"),
		"--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1", "--skip-name-resolve",
		"--server-id=" + strconv.Itoa(s.serverID), "--log-bin=binlog", "--log-slave-updates",
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
		// A commit is written to the operating system at once, which a
		// SIGKILL of the server does not lose; it is not synced to disk.
		"--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",
		"--max-connections=300", "--performance-schema=off"}
	if s.readOnly {
		args = append(args, "--read-only=1")
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(serverBin(), args...)
	// No server outlives the tests.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mysqlserver: start mariadbd: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(exited); err != nil {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
		s.cmd = nil
		return fmt.Errorf("mysqlserver: mariadbd: %w: %s", err, s.logTail())
	}
	return nil
}

// waitReady returns once the server of this data folder answers on s's
// port, or an error if it exits first or readyTimeout passes. A server of
// another test that took the port is not taken for this one.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := func() error {
			db, err := sql.Open("mysql", s.DSN("root", ""))
			if err != nil {
				return err
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var dir string
			if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&dir); err != nil {
				return err
			}
			if filepath.Clean(dir) != s.data() {
				return fmt.Errorf("the server there serves %s, not %s", dir, s.data())
			}
			return nil
		}()
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

// DSN returns the data source name of user (with password, if not empty)
// through s's address.
func (s *Server) DSN(user, password string) string { return s.DSNAt(s.Addr(), user, password) }

// DSNAt returns the data source name of user through addr: s's own address
// or a proxy's.
func (s *Server) DSNAt(addr, user, password string) string {
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr = user, password, "tcp", addr
	return c.FormatDSN()
}

// PID returns the server's process id, 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Signal sends sig to the server's process (SIGSTOP and SIGCONT pause and
// resume it).
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("mysqlserver: the server is not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Stop shuts the server down normally (SIGTERM: it ends every session and
// writes its data) and returns once it has exited.
func (s *Server) Stop() error { return s.stop(syscall.SIGTERM) }

// Kill kills the server with SIGKILL, as a crash would, and returns once it
// has exited.
func (s *Server) Kill() error { return s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot shut down
	s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(readyTimeout):
		s.cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
		return fmt.Errorf("mysqlserver: mariadbd did not exit %v after %v", readyTimeout, sig)
	}
	s.cmd = nil
	return nil
}

// Close kills the server if it runs and removes its folder.
func (s *Server) Close() error {
	err := s.Kill()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// StartReplica starts a new server, read-only, that replicates s from the
// start of its binary log, and returns once it has caught up. The caller
// must Close it.
func (s *Server) StartReplica() (*Server, error) {
	r, err := start(s.serverID+1, true)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", r.DSN("root", ""))
	if err != nil {
		r.Close()
		return nil, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	_, err = db.ExecContext(ctx, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_LOG_FILE='binlog.000001', MASTER_LOG_POS=4, MASTER_CONNECT_RETRY=1", s.port))
	if err == nil {
		_, err = db.ExecContext(ctx, "START SLAVE")
	}
	if err == nil {
		err = r.CatchUp(s)
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("mysqlserver: replica: %w", err)
	}
	return r, nil
}

// CatchUp returns once the replica r has applied everything its primary s
// has written so far.
func (r *Server) CatchUp(s *Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	pdb, err := sql.Open("mysql", s.DSN("root", ""))
	if err != nil {
		return err
	}
	defer pdb.Close()
	var gtid string
	if err := pdb.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&gtid); err != nil {
		return fmt.Errorf("mysqlserver: read the primary's position: %w", err)
	}
	rdb, err := sql.Open("mysql", r.DSN("root", ""))
	if err != nil {
		return err
	}
	defer rdb.Close()
	var res sql.NullInt64
	if err := rdb.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", gtid, int(readyTimeout/time.Second)).Scan(&res); err != nil {
		return fmt.Errorf("mysqlserver: wait for the replica: %w", err)
	}
	if !res.Valid || res.Int64 != 0 {
		return fmt.Errorf("mysqlserver: the replica did not reach %s within %v", gtid, readyTimeout)
	}
	return nil
}

// Promote makes a replica the primary, as an operator's failover does: it
// stops replicating and takes writes.
func (r *Server) Promote() error {
	db, err := sql.Open("mysql", r.DSN("root", ""))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("mysqlserver: promote: %s: %w", q, err)
		}
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("mysqlserver: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
