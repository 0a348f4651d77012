package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/internal/lockset/history"
	"github.com/zukhruf/lease/issuers/pglease"
)

// pgBin is the folder of Debian's PostgreSQL binaries; PGBIN overrides it.
func pgBin() string {
	if d := os.Getenv("PGBIN"); d != "" {
		return d
	}
	return "/usr/lib/postgresql/15/bin"
}

// pgKey is the advisory lock key of lock, on both sides.
func pgKey(lock string) int64 { return pglease.Key("lockset:" + lock) }

// The tables the clients take their tokens from: the lease's fencing table,
// and a sequence for the peer, which has none.
const pgSchema = `CREATE TABLE IF NOT EXISTS lockset_tokens (key bigint PRIMARY KEY, token bigint NOT NULL);
CREATE SEQUENCE IF NOT EXISTS lockset_peer_tokens`

// pgCredential returns the user the server runs as when this process is
// root, which PostgreSQL refuses: postgres, or nobody.
func pgCredential() (*syscall.Credential, error) {
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
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("running as root, and there is no user postgres or nobody to run PostgreSQL as")
}

// startPG starts PostgreSQL on its data (made by initdb at the first
// start, in a folder of its own that the server's user owns: the run's
// folder is this user's alone), on the port of the last start if there
// was one. The faults stop and kill the postmaster and its children, the
// backends: each leads a process group of its own, and one outlives a
// killed postmaster until it notices.
func (r *runner) startPG() (string, error) {
	bin := pgBin()
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		return "", fmt.Errorf("%s/initdb not found (set PGBIN to its folder): install the Debian package postgresql (make pg-deps): %w", bin, err)
	}
	cred, err := pgCredential()
	if err != nil {
		return "", err
	}
	first := r.serverDir == ""
	if first {
		if err := r.pgInit(cred); err != nil {
			return "", err
		}
	}
	return r.serve(func(port int) (*exec.Cmd, error) {
		return r.pgPostgres(cred, "data", port)
	}, true, func(addr string, exited <-chan struct{}) error { return pgReady(addr, first, exited) })
}

// pgCommand returns the command of the PostgreSQL binary name, run as
// cred (see pgCredential).
func pgCommand(cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(pgBin(), name), args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

// pgInit makes the server's folder, which its user owns, and a cluster's
// data in it, in the folder data.
func (r *runner) pgInit(cred *syscall.Credential) error {
	var err error
	if r.serverDir, err = os.MkdirTemp("", "lockset-pg-"); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(r.serverDir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	if out, err := pgCommand(cred, "initdb", "-D", filepath.Join(r.serverDir, "data"), "-U", "postgres", "-A", "trust",
		"--locale=C", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	return nil
}

// pgPostgres returns the command of the server on the data in the folder
// data of the server's folder, on port, with the settings extra (-c
// name=value each), logging into the server's folder.
func (r *runner) pgPostgres(cred *syscall.Credential, data string, port int, extra ...string) (*exec.Cmd, error) {
	logf, err := os.OpenFile(filepath.Join(r.serverDir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// Commits are synchronous: a token taken must survive a kill of
	// the server, which loses what is in its memory, not what the
	// kernel has (fsync=off).
	args := []string{"-D", filepath.Join(r.serverDir, data), "-p", strconv.Itoa(port), "-k", r.serverDir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200",
		"-c", "log_min_messages=fatal"}
	for _, e := range extra {
		args = append(args, "-c", e)
	}
	cmd := pgCommand(cred, "postgres", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd, nil
}

// pgConnString is the connection string of the server at addr; of
// several, "ADDR,ADDR", the one that takes writes (the failover mix's
// primary).
func pgConnString(addr string) string {
	s := "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	if strings.Contains(addr, ",") {
		s += "&target_session_attrs=read-write"
	}
	return s
}

// pgReady waits until the server at addr takes a statement (and, at the
// first start, makes the token tables), or exited closes.
func pgReady(addr string, first bool, exited <-chan struct{}) error {
	statement := "SELECT 1"
	if first {
		statement = pgSchema
	}
	return waitServing("postgres", 30*time.Second, exited, func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, pgConnString(addr))
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, statement)
		return err
	})
}

// pgTerminateHolder ends the session that holds lock's advisory lock, as an
// operator's pg_terminate_backend would; see runner.eraseLock.
func (r *runner) pgTerminateHolder(ctx context.Context, lock string) (int64, bool) {
	c, err := pgx.Connect(ctx, pgConnString(fmt.Sprintf("127.0.0.1:%d", r.serverPort)))
	if err != nil {
		return 0, false
	}
	defer c.Close(context.Background())
	// A bigint key is classid (its high half) and objid (its low half),
	// with objsubid 1.
	at := history.Now()
	var ended int
	err = c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, pgKey(lock)).Scan(&ended)
	return at, err == nil && ended > 0
}

// pgLocker takes the lock with pglease (side lease), or (side peer) as a
// service does by hand: pg_advisory_lock on a connection of its own, held
// while the connection answers a ping, with a token from a sequence.
type pgLocker struct {
	cfg  clientConfig
	pool *pgxpool.Pool // the lease's
	conn *pgx.Conn     // the peer's, dialed again once it fails
}

func newPGLocker(c clientConfig) (*pgLocker, error) {
	l := &pgLocker{cfg: c}
	if c.side == "lease" {
		pool, err := pgxpool.New(context.Background(), pgConnString(c.endpoint))
		if err != nil {
			return nil, err
		}
		l.pool = pool
	}
	return l, nil
}

func (l *pgLocker) close() {
	if l.pool != nil {
		l.pool.Close()
	}
	if l.conn != nil {
		l.conn.Close(context.Background())
	}
}

// pgConfig is the lease's: the server frees the lock of a silent session
// after the TTL, and the lease is lost half a TTL after the send of its
// last confirmed heartbeat.
func pgConfig(ttl time.Duration) pglease.Config {
	return pglease.Config{Heartbeat: ttl / 8, Deadline: ttl / 2, ServerTimeout: ttl, Fence: pgx.Identifier{"public", "lockset_tokens"}}
}

func (l *pgLocker) acquire(ctx context.Context, lock string) (holding, error) {
	subject := "lockset:" + lock
	if l.cfg.side == "peer" {
		return l.acquireByHand(ctx, lock)
	}
	le, err := pgConfig(l.cfg.ttl).Lock(ctx, l.pool, subject)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	return leaseHolding{sig: le.Signal(), tok: le.Token(), unlock: le.Unlock}, nil
}

func (l *pgLocker) acquireByHand(ctx context.Context, lock string) (holding, error) {
	if l.conn == nil || l.conn.IsClosed() {
		c, err := pgx.Connect(ctx, pgConnString(l.cfg.endpoint))
		if err != nil {
			return nil, err
		}
		l.conn = c
	}
	if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", pgKey(lock)); err != nil {
		// A cut wait may have been granted: the session is no longer to
		// be trusted.
		l.conn.Close(context.Background())
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	var token int64
	if err := l.conn.QueryRow(ctx, "SELECT nextval('lockset_peer_tokens')").Scan(&token); err != nil {
		l.conn.Close(context.Background())
		return nil, fmt.Errorf("the token: %w", err)
	}
	return &pgByHand{conn: l.conn, key: pgKey(lock), tok: token, ping: l.cfg.ttl / 2}, nil
}

// pgByHand is an advisory lock held the usual way: the holder checks,
// before each write, that its connection still answers (a session that
// ended took the lock with it).
type pgByHand struct {
	conn *pgx.Conn
	key  int64
	tok  int64
	ping time.Duration
}

func (h *pgByHand) token() int64          { return h.tok }
func (h *pgByHand) lost() <-chan struct{} { return nil }
func (h *pgByHand) held() bool {
	if h.conn.IsClosed() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.ping)
	defer cancel()
	if h.conn.Ping(ctx) != nil {
		h.conn.Close(context.Background())
		return false
	}
	return true
}
func (h *pgByHand) release(ctx context.Context) error {
	if h.conn.IsClosed() {
		return errors.New("the connection failed while held")
	}
	if _, err := h.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", h.key); err != nil {
		h.conn.Close(context.Background())
		return err
	}
	return nil
}
