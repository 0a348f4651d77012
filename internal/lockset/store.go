package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/fencing/etcdfence"
	"github.com/zukhruf/lease/fencing/redisfence"
	"github.com/zukhruf/lease/fencing/s3fence"
)

// stores are the real stores a run's register can also be kept in (-register),
// each behind its fence of package fencing: PostgreSQL and MariaDB
// (fencing.SQL), Redis (redisfence), etcd (etcdfence), an S3 object on
// versitygw (s3fence), and the harness's own process (fencing.Handler over
// a fencing.Memory, reached through fencing.Transport).
var stores = []string{"pg", "mysql", "redis", "etcd", "s3", "memory"}

// The names the stores keep the register under.
const (
	storeFenceTable = "lockset_fences"
	storeDataTable  = "lockset_register"
	storeDatabase   = "lockset_register" // MariaDB's; PostgreSQL's is postgres
	storeKeyPrefix  = "lockset-register:"
	memoryPath      = "/fenced/write"
)

// A storeServer is the server of a run's real store: a process of its own,
// started before the clients and outside the faults, like the harness's
// register; or, for memory, the harness's HTTP server.
type storeServer struct {
	kind, addr string // the clients' -store: kind=addr
	cmd        *exec.Cmd
	done       chan struct{}
	dir        string
}

// stop kills the store's process and removes its files.
func (s *storeServer) stop() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// startStore starts the real store kind for the run's register: for
// memory, it adds the fenced handler to mux, on the harness's register at
// register (its URL).
func (r *runner) startStore(kind string, mux *http.ServeMux, register string) (*storeServer, error) {
	s := &storeServer{kind: kind}
	var err error
	switch kind {
	case "memory":
		mux.Handle(memoryPath, fencing.Handler(&fencing.Memory{}, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.WriteHeader(http.StatusNoContent) // the fence is the register: its token is what the check counts
		})))
		s.addr = register + memoryPath
		return s, nil
	case "pg":
		err = s.startPG()
	case "mysql":
		err = s.startMySQL()
	case "redis":
		err = s.startRedis()
	case "etcd":
		err = s.startEtcd(r.self)
	case "s3":
		err = s.startS3()
	default:
		return nil, fmt.Errorf("no register store %q (%s)", kind, strings.Join(stores, ", "))
	}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("the register's %s: %w", kind, err)
	}
	return s, nil
}

// start starts cmd, killed if this process dies.
func (s *storeServer) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(s.done) }()
	return nil
}

func (s *storeServer) startPG() error {
	bin := pgBin()
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		return fmt.Errorf("%s/initdb not found (set PGBIN to its folder): install the Debian package postgresql (make pg-deps): %w", bin, err)
	}
	cred, err := pgCredential()
	if err != nil {
		return err
	}
	if s.dir, err = os.MkdirTemp("", "lockset-store-pg-"); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(s.dir, "data")
	if out, err := pgCommand(cred, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "--locale=C", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	cmd := pgCommand(cred, "postgres", "-D", data, "-p", strconv.Itoa(port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200", "-c", "log_min_messages=fatal")
	if err := s.start(cmd); err != nil {
		return err
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", port)
	return s.createTables("pgx", pgConnString(s.addr), fencing.Postgres)
}

func (s *storeServer) startMySQL() error {
	for _, b := range []string{mariadbd(), mariadbInstall()} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s not found (set MARIADBD and MARIADB_INSTALL_DB): install the Debian package mariadb-server (make mysql-deps): %w", b, err)
		}
	}
	var err error
	// The socket's path must fit in 107 bytes.
	if s.dir, err = os.MkdirTemp("", "lsst"); err != nil {
		return err
	}
	data, tmp := filepath.Join(s.dir, "data"), filepath.Join(s.dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	root := os.Geteuid() == 0
	args := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if root {
		args = append(args, "--user=root")
	}
	if out, err := exec.Command(mariadbInstall(), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	args = []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--socket=" + filepath.Join(s.dir, "sock"),
		"--pid-file=" + filepath.Join(s.dir, "pid"), "--log-error=" + filepath.Join(s.dir, "log"),
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-name-resolve",
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2",
		"--max-connections=1000", "--performance-schema=off"}
	if root {
		args = append(args, "--user=root")
	}
	if err := s.start(exec.Command(mariadbd(), args...)); err != nil {
		return err
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", port)
	db, err := sql.Open("mysql", mysqlDSN(s.addr))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := waitServing("mariadbd", 60*time.Second, s.done, db.PingContext); err != nil {
		return err
	}
	if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS " + storeDatabase); err != nil {
		return err
	}
	return s.createTables("mysql", storeMySQLDSN(s.addr), fencing.MySQL)
}

// storeMySQLDSN is the data source name of the register's database at addr.
func storeMySQLDSN(addr string) string {
	c, _ := mysql.ParseDSN(mysqlDSN(addr))
	c.DBName = storeDatabase
	return c.FormatDSN()
}

// createTables waits for the SQL server, then creates the fence table and
// the register's.
func (s *storeServer) createTables(driver, dsn string, d fencing.Dialect) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	f := fencing.SQL{Table: storeFenceTable, Dialect: d}
	return waitServing("the register's "+s.kind, 60*time.Second, s.done, func(ctx context.Context) error {
		if err := f.CreateTable(ctx, db); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+storeDataTable+" (resource VARCHAR(255) PRIMARY KEY, value BIGINT NOT NULL, token BIGINT NOT NULL)")
		return err
	})
}

func (s *storeServer) startRedis() error {
	var err error
	if s.dir, err = os.MkdirTemp("", "lockset-store-redis-"); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	cmd, err := redisCommand(s.dir, port)
	if err != nil {
		return err
	}
	if err := s.start(cmd); err != nil {
		return err
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", port)
	return redisReady(s.addr, s.done)
}

// startS3 runs a versitygw of its own, its bucket made.
func (s *storeServer) startS3() error {
	var err error
	if s.dir, err = os.MkdirTemp("", "lockset-store-s3-"); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	cmd, err := versitygwCommand(s.dir, port)
	if err != nil {
		return err
	}
	err = s.start(cmd)
	cmd.Stdout.(*os.File).Close() // the child's once started
	if err != nil {
		return err
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", port)
	return s3Ready(s.addr, s.done)
}

// startEtcd runs "lockset server -issuer etcd", a member of its own.
func (s *storeServer) startEtcd(self string) error {
	var err error
	if s.dir, err = os.MkdirTemp("", "lockset-store-etcd-"); err != nil {
		return err
	}
	cmd := exec.Command(self, "server", "-issuer", "etcd", "-dir", filepath.Join(s.dir, "member"))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := s.start(cmd); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		return errors.New("the etcd member exited before it served")
	}
	endpoint, ok := strings.CutPrefix(sc.Text(), "endpoint ")
	if !ok {
		return fmt.Errorf("the etcd member said %q", sc.Text())
	}
	go io.Copy(io.Discard, stdout)
	s.addr = endpoint
	return nil
}

// A storeWriter is a client process's way to the run's real store: it
// writes a lock's register through the store's fence.
type storeWriter interface {
	// write writes value with token, in one atomic step with the fence's
	// check: an error wrapping fencing.ErrStale when the store refused it
	// as stale, another error when its outcome is not known.
	write(ctx context.Context, lock string, token, value int64) error
	// advance raises the fence to token without a write: the call a new
	// holder makes right after the grant.
	advance(ctx context.Context, lock string, token int64) error
	close()
}

// openStore opens the store of spec, kind=addr (a client's -store).
func openStore(spec string, ttl time.Duration, hc *http.Client) (storeWriter, error) {
	kind, addr, ok := strings.Cut(spec, "=")
	if !ok {
		return nil, fmt.Errorf("-store %q is not kind=addr", spec)
	}
	switch kind {
	case "pg":
		return openSQLStore("pgx", pgConnString(addr), fencing.Postgres, "$1, $2, $3")
	case "mysql":
		return openSQLStore("mysql", storeMySQLDSN(addr), fencing.MySQL, "?, ?, ?")
	case "redis":
		rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: ttl / 2, ReadTimeout: ttl / 2, WriteTimeout: ttl / 2})
		return redisStore{rdb}, nil
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: ttl, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		return etcdStore{cli}, nil
	case "s3":
		c, err := s3Client(addr)
		if err != nil {
			return nil, err
		}
		return s3Store{s3fence.Fence{Client: c, Bucket: s3Bucket}}, nil
	case "memory":
		return memoryStore{url: addr, hc: &http.Client{Timeout: hc.Timeout, Transport: &fencing.Transport{Base: hc.Transport}}}, nil
	}
	return nil, fmt.Errorf("no register store %q (%s)", kind, strings.Join(stores, ", "))
}

// sqlStore writes the register's row in a transaction that fencing.SQL's
// Check opens.
type sqlStore struct {
	db     *sql.DB
	fence  fencing.SQL
	upsert string
}

func openSQLStore(driver, dsn string, d fencing.Dialect, params string) (*sqlStore, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	upsert := "INSERT INTO " + storeDataTable + " (resource, value, token) VALUES (" + params + ") "
	if d == fencing.Postgres {
		upsert += "ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token"
	} else {
		upsert += "ON DUPLICATE KEY UPDATE value = VALUES(value), token = VALUES(token)"
	}
	return &sqlStore{db: db, fence: fencing.SQL{Table: storeFenceTable, Dialect: d}, upsert: upsert}, nil
}

func (s *sqlStore) write(ctx context.Context, lock string, token, value int64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.fence.Check(ctx, tx, lock, token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.upsert, lock, value, token); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *sqlStore) advance(ctx context.Context, lock string, token int64) error {
	return s.fence.Advance(ctx, s.db, lock, token)
}

func (s *sqlStore) close() { s.db.Close() }

type redisStore struct{ rdb *redis.Client }

func (s redisStore) write(ctx context.Context, lock string, token, value int64) error {
	return redisfence.Fence{Client: s.rdb}.Set(ctx, storeKeyPrefix+lock, token, strconv.FormatInt(value, 10))
}

func (s redisStore) advance(ctx context.Context, lock string, token int64) error {
	return redisfence.Fence{Client: s.rdb}.Advance(ctx, storeKeyPrefix+lock, token)
}

func (s redisStore) close() { s.rdb.Close() }

type etcdStore struct{ cli *clientv3.Client }

func (s etcdStore) write(ctx context.Context, lock string, token, value int64) error {
	return etcdfence.Fence{KV: s.cli}.Put(ctx, storeKeyPrefix+lock, token, strconv.FormatInt(value, 10))
}

func (s etcdStore) advance(ctx context.Context, lock string, token int64) error {
	return etcdfence.Fence{KV: s.cli}.Advance(ctx, storeKeyPrefix+lock, token)
}

func (s etcdStore) close() { s.cli.Close() }

// s3Store keeps the register in an object, its fence in the object's
// first line, each write a conditional PutObject.
type s3Store struct{ fence s3fence.Fence }

func (s s3Store) write(ctx context.Context, lock string, token, value int64) error {
	return s.fence.Put(ctx, storeKeyPrefix+lock, token, strconv.AppendInt(nil, value, 10))
}

func (s s3Store) advance(ctx context.Context, lock string, token int64) error {
	return s.fence.Advance(ctx, storeKeyPrefix+lock, token)
}

func (s s3Store) close() {}

// memoryStore sends the write to the harness's fencing.Handler, its token
// in the request's headers by fencing.Transport.
type memoryStore struct {
	url string
	hc  *http.Client
}

func (s memoryStore) write(ctx context.Context, lock string, token, value int64) error {
	return s.post(ctx, lock, token, s.url+"?"+url.Values{"value": {strconv.FormatInt(value, 10)}}.Encode())
}

// advance sends a request with no value: the handler behind the fence
// writes nothing, and the fence is raised.
func (s memoryStore) advance(ctx context.Context, lock string, token int64) error {
	return s.post(ctx, lock, token, s.url)
}

func (s memoryStore) post(ctx context.Context, lock string, token int64, url string) error {
	ctx = fencing.WithToken(ctx, lock, token)
	req, err := http.NewRequestWithContext(ctx, "POST", url, nil)
	if err != nil {
		return err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := fencing.StaleResponse(resp); err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("the register answered %s", resp.Status)
	}
	return nil
}

func (s memoryStore) close() {}

// Compile-time checks.
var (
	_ storeWriter = (*sqlStore)(nil)
	_ storeWriter = redisStore{}
	_ storeWriter = etcdStore{}
	_ storeWriter = s3Store{}
	_ storeWriter = memoryStore{}
)
