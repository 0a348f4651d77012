package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/zukhruf/lease/internal/lockset/history"
	"github.com/zukhruf/lease/issuers/mysqllease"
)

// The MariaDB binaries of Debian's mariadb-server; MARIADBD and
// MARIADB_INSTALL_DB override them.
func mariadbd() string       { return envOr("MARIADBD", "/usr/sbin/mariadbd") }
func mariadbInstall() string { return envOr("MARIADB_INSTALL_DB", "/usr/bin/mariadb-install-db") }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// The tables the clients take their tokens from: the lease's fencing
// table, and a counter for the peer, which has none.
var mysqlSchema = []string{
	"CREATE DATABASE IF NOT EXISTS lockset",
	"CREATE TABLE IF NOT EXISTS lockset.tokens (name VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS lockset.peer_tokens (id INT PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB",
	"INSERT IGNORE INTO lockset.peer_tokens VALUES (1, 0)",
}

// mysqlLockName is the server's name of lock, on both sides.
func mysqlLockName(lock string) string {
	name, _ := mysqllease.LockName("lockset:" + lock)
	return name
}

// mysqlDSN is the data source name of root at addr.
func mysqlDSN(addr string) string {
	c := mysql.NewConfig()
	c.User, c.Net, c.Addr = "root", "tcp", addr
	c.Timeout = 2 * time.Second
	return c.FormatDSN()
}

// startMySQL starts MariaDB on its data (made by mariadb-install-db at the
// first start), on the port of the last start if there was one. A commit
// is written to the kernel at once, which a SIGKILL of the server does not
// lose: a token taken survives the kill.
func (r *runner) startMySQL() (string, error) {
	for _, b := range []string{mariadbd(), mariadbInstall()} {
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("%s not found (set MARIADBD and MARIADB_INSTALL_DB): install the Debian package mariadb-server (make mysql-deps): %w", b, err)
		}
	}
	dir := filepath.Join(r.dir, "server")
	data, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "tmp")
	first := r.serverPort == 0
	if first {
		// The socket's path must fit in 107 bytes, which the run's folder
		// under a long TMPDIR may not leave.
		var err error
		if r.serverDir, err = os.MkdirTemp("", "lsmy"); err != nil {
			return "", err
		}
		// A tmpdir of its own: a starting mariadbd removes the #sql* files
		// of a shared one, another server's temporary tables.
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			return "", err
		}
		args := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--auth-root-authentication-method=normal", "--skip-test-db"}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		if out, err := exec.Command(mariadbInstall(), args...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("mariadb-install-db: %w: %s", err, out)
		}
	}
	return r.serve(func(port int) (*exec.Cmd, error) {
		// max-connections: mysqllease's waits once took a session each,
		// so that 400 locks contended by processes of 200 (-perprocess)
		// took every connection of 300 and then of 1000 (docs/lockset.md,
		// "Many locks per process"); its sessions of waits are bounded
		// now (Config.Waiters), at most 2 × (Sessions + Waiters) = 16
		// connections a process, and 300 is MariaDB's own order.
		args := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--socket=" + filepath.Join(r.serverDir, "sock"),
			"--pid-file=" + filepath.Join(dir, "pid"), "--log-error=" + filepath.Join(dir, "log"),
			"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-name-resolve",
			"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2",
			"--max-connections=300", "--performance-schema=off"}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		cmd := exec.Command(mariadbd(), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd, nil
	}, false, func(addr string, exited <-chan struct{}) error { return mysqlReady(addr, first, exited) })
}

// mysqlReady waits until the server at addr takes a statement (and, at the
// first start, makes the token tables), or exited closes.
func mysqlReady(addr string, first bool, exited <-chan struct{}) error {
	db, err := sql.Open("mysql", mysqlDSN(addr))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := waitServing("mariadbd", 60*time.Second, exited, db.PingContext); err != nil || !first {
		return err
	}
	for _, q := range mysqlSchema {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// mysqlTerminateHolder ends the session that holds lock, as an operator's
// KILL would; see runner.eraseLock.
func (r *runner) mysqlTerminateHolder(ctx context.Context, lock string) (int64, bool) {
	db, err := sql.Open("mysql", mysqlDSN(fmt.Sprintf("127.0.0.1:%d", r.serverPort)))
	if err != nil {
		return 0, false
	}
	defer db.Close()
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", mysqlLockName(lock)).Scan(&id); err != nil || !id.Valid {
		if err != nil {
			fmt.Println("lockset: terminate-session: IS_USED_LOCK:", err)
		}
		return 0, false
	}
	at := history.Now()
	_, err = db.ExecContext(ctx, "KILL "+strconv.FormatInt(id.Int64, 10))
	if err != nil {
		fmt.Println("lockset: terminate-session: KILL:", err)
	}
	return at, err == nil
}

// mysqlLocker takes the lock with mysqllease (side lease), or (side peer)
// as a service does by hand: GET_LOCK on a connection of its own, held
// while the connection answers a ping, with a token from a counter.
type mysqlLocker struct {
	cfg  clientConfig
	db   *sql.DB
	conn *sql.Conn // the peer's, taken again once it fails
}

func newMySQLLocker(c clientConfig) (*mysqlLocker, error) {
	// The driver's complaints during a fault are the fault, and would
	// drown the run's output.
	mysql.SetLogger(log.New(io.Discard, "", 0))
	db, err := sql.Open("mysql", mysqlDSN(c.endpoint))
	if err != nil {
		return nil, err
	}
	return &mysqlLocker{cfg: c, db: db}, nil
}

func (l *mysqlLocker) close() {
	if l.conn != nil {
		l.conn.Close()
	}
	l.db.Close()
}

// mysqlConfig is the lease's for a TTL of whole seconds: the server frees
// the lock of a silent session after the TTL, and the lease is lost half a
// TTL after the send of its last confirmed heartbeat.
func mysqlConfig(ttl time.Duration) mysqllease.Config {
	return mysqllease.Config{ServerTimeout: ttl, Margin: ttl / 2, Heartbeat: ttl / 8, Fence: "lockset.tokens"}
}

func (l *mysqlLocker) acquire(ctx context.Context, lock string) (holding, error) {
	if l.cfg.side == "peer" {
		return l.acquireByHand(ctx, lock)
	}
	le, err := mysqlConfig(l.cfg.ttl).Lock(ctx, l.db, "lockset:"+lock)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	return leaseHolding{sig: le.Signal(), tok: le.Token(), unlock: le.Unlock}, nil
}

func (l *mysqlLocker) acquireByHand(ctx context.Context, lock string) (holding, error) {
	if l.conn == nil {
		c, err := l.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		l.conn = c
	}
	drop := func() {
		// A session that may hold the lock must not serve another
		// statement: database/sql discards a connection that says it is
		// bad.
		l.conn.Raw(func(any) error { return driver.ErrBadConn })
		l.conn.Close()
		l.conn = nil
	}
	wait := 1
	if dl, ok := ctx.Deadline(); ok {
		wait = max(1, int(math.Ceil(time.Until(dl).Seconds())))
	}
	var got sql.NullInt64
	if err := l.conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", mysqlLockName(lock), wait).Scan(&got); err != nil {
		// A cut wait may have been granted: the session is no longer to
		// be trusted.
		drop()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	if got.Int64 != 1 {
		return nil, errors.New("GET_LOCK timed out")
	}
	var token int64
	_, err := l.conn.ExecContext(ctx, "UPDATE lockset.peer_tokens SET token = LAST_INSERT_ID(token + 1) WHERE id = 1")
	if err == nil {
		err = l.conn.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&token)
	}
	if err != nil {
		drop()
		return nil, fmt.Errorf("the token: %w", err)
	}
	return &mysqlByHand{conn: l.conn, name: mysqlLockName(lock), tok: token, drop: drop, ping: l.cfg.ttl / 2}, nil
}

// mysqlByHand is a lock held the usual way: the holder checks, before
// each write, that its connection still answers (a session that ended
// took the lock with it).
type mysqlByHand struct {
	conn *sql.Conn
	name string
	tok  int64
	drop func()
	ping time.Duration
	bad  bool
}

func (h *mysqlByHand) token() int64          { return h.tok }
func (h *mysqlByHand) lost() <-chan struct{} { return nil }
func (h *mysqlByHand) held() bool {
	if h.bad {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.ping)
	defer cancel()
	if h.conn.PingContext(ctx) != nil {
		h.bad = true
		h.drop()
	}
	return !h.bad
}
func (h *mysqlByHand) release(ctx context.Context) error {
	if h.bad {
		return errors.New("the connection failed while held")
	}
	if _, err := h.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", h.name); err != nil {
		h.bad = true
		h.drop()
		return err
	}
	return nil
}
