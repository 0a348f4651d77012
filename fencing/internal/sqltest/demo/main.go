// Command demo shows a fence refusing the write of a holder stopped past
// its lease.
//
// It starts a PostgreSQL server and a redis-server (the Debian packages
// postgresql and redis-server) on loopback ports, in a temporary folder.
// Holder A, a child process, takes the lease "invoice-42" from redislease
// (a 2 s TTL), raises the fence of fencing.SQL and writes its first batch
// of rows; it checks its lease, which is live, and is stopped with SIGSTOP
// before its second batch, as a long GC pause or a stopped virtual machine
// would stop it. The key expires; holder B takes the lease with a larger
// token, raises the fence and writes its rows. A is resumed with SIGCONT
// and sends its second batch: the lease warned it too late, the database
// refuses the batch with fencing.ErrStale, and B's rows are intact. The
// demo prints the timeline and removes everything it made.
//
// Run it with `make demo-fencing`, or `go run ./demo` in this module.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/internal/testservers/pgserver"
	"github.com/zukhruf/lease/issuers/redislease"
)

const (
	subject = "invoice-42"
	bound   = 60 * time.Second // guards the demo's waits against a hang
	envA    = "FENCING_DEMO_A" // "redis addr|postgres URL": this process is holder A
)

var (
	locker = redislease.Config{TTL: 2 * time.Second}
	fence  = fencing.SQL{Table: "fences", Dialect: fencing.Postgres}
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	if spec := os.Getenv(envA); spec != "" {
		os.Exit(holderA(spec))
	}
	if err := run(os.Stdout, os.Args[0]); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// timeline prints events with the time since the demo began.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (tl *timeline) say(who, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.out, "%6d ms  %-9s %s\n", time.Since(tl.start).Milliseconds(), who, fmt.Sprintf(format, args...))
}

// writeBatch writes rows under the fence, in one transaction.
func writeBatch(ctx context.Context, db *sql.DB, token int64, holder string, batch int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fence.Check(ctx, tx, subject, token); err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		if _, err := tx.ExecContext(ctx, "INSERT INTO invoice_rows (invoice, line, holder, batch) VALUES ($1, $2, $3, $4) "+
			"ON CONFLICT (invoice, line) DO UPDATE SET holder = EXCLUDED.holder, batch = EXCLUDED.batch",
			subject, (batch-1)*3+i, holder, batch); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// run is the demo's parent: the servers, holder B, and A's stop and resume.
func run(out io.Writer, self string) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	tl := &timeline{out: out}

	pg, err := pgserver.Start()
	if err != nil {
		return err
	}
	defer pg.Close()
	rs, err := startRedis()
	if err != nil {
		return err
	}
	defer rs.close()
	pgURL := pg.ConnString(pg.Addr())
	db, err := sql.Open("pgx", pgURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := fence.CreateTable(ctx, db); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE invoice_rows (invoice TEXT, line INT, holder TEXT NOT NULL, batch INT NOT NULL, PRIMARY KEY (invoice, line))"); err != nil {
		return err
	}
	tl.start = time.Now()
	tl.say("setup", "PostgreSQL on %s (table invoice_rows, fence table fences), redis-server on %s", pg.Addr(), rs.addr)

	a := exec.CommandContext(ctx, self)
	a.Env = append(os.Environ(), envA+"="+rs.addr+"|"+pgURL)
	a.Stderr = os.Stderr
	stdin, err := a.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := a.StdoutPipe()
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		return err
	}
	defer func() { _ = a.Process.Kill(); _ = a.Wait() }()
	lines := bufio.NewScanner(stdout)
	// relay prints A's lines until one that starts with until.
	relay := func(until string) error {
		for lines.Scan() {
			l := lines.Text()
			tl.say("holder A", "%s", l)
			if strings.HasPrefix(l, until) {
				return nil
			}
		}
		return fmt.Errorf("holder A stopped before %q", until)
	}
	if err := relay("checks its lease"); err != nil {
		return err
	}
	if err := syscall.Kill(a.Process.Pid, syscall.SIGSTOP); err != nil {
		return err
	}
	stopped := time.Now()
	tl.say("demo", "SIGSTOP holder A, between its check and its second batch")

	rdb := redis.NewClient(&redis.Options{Addr: rs.addr})
	defer rdb.Close()
	b, err := locker.Lock(ctx, rdb, subject)
	if err != nil {
		return err
	}
	defer b.Unlock(context.Background())
	tl.say("holder B", "Lock(%q): token %d, %v after A was stopped: A's key expired", subject, b.Token(), time.Since(stopped).Round(time.Millisecond))
	if err := fence.Advance(ctx, db, subject, b.Token()); err != nil {
		return err
	}
	tl.say("holder B", "raised the fence to %d (advance on grant)", b.Token())
	if err := writeBatch(ctx, db, b.Token(), "B", 1); err != nil {
		return err
	}
	tl.say("holder B", "wrote batch 1: lines 1-3, over A's")

	if err := syscall.Kill(a.Process.Pid, syscall.SIGCONT); err != nil {
		return err
	}
	tl.say("demo", "SIGCONT holder A")
	if _, err := io.WriteString(stdin, "\n"); err != nil {
		return err
	}
	if err := relay("done"); err != nil {
		return err
	}

	rows, err := db.QueryContext(ctx, "SELECT line, holder, batch FROM invoice_rows ORDER BY line")
	if err != nil {
		return err
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var line, batch int
		var holder string
		if err := rows.Scan(&line, &holder, &batch); err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%d:%s/%d", line, holder, batch))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	tl.say("database", "invoice_rows (line:holder/batch): %s", strings.Join(got, " "))
	if want := "1:B/1 2:B/1 3:B/1"; strings.Join(got, " ") != want {
		return fmt.Errorf("rows %v, want %s", got, want)
	}
	tl.say("database", "B's rows intact; A's second batch refused")
	return nil
}

// holderA is the child process: it prints its steps, one a line, for the
// parent's timeline, and returns its exit code.
func holderA(spec string) int {
	redisAddr, pgURL, _ := strings.Cut(spec, "|")
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "holder A:", err); return 1 }
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	db, err := sql.Open("pgx", pgURL)
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	l, err := locker.Lock(ctx, rdb, subject)
	if err != nil {
		return fail(err)
	}
	defer l.Unlock(context.Background())
	fmt.Printf("Lock(%q): token %d (redislease, TTL %v)\n", subject, l.Token(), locker.TTL)
	if err := fence.Advance(ctx, db, subject, l.Token()); err != nil {
		return fail(err)
	}
	if err := writeBatch(ctx, db, l.Token(), "A", 1); err != nil {
		return fail(err)
	}
	fmt.Println("wrote batch 1: lines 1-3")
	fmt.Printf("checks its lease before batch 2: Signal().Err() = %v\n", l.Signal().Err())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // where the parent stops it
	fmt.Println("resumed: sends batch 2 (lines 4-6) with token " + strconv.FormatInt(l.Token(), 10))
	err = writeBatch(ctx, db, l.Token(), "A", 2)
	fmt.Printf("batch 2: %v\n", err)
	fmt.Printf("errors.Is(err, fencing.ErrStale) = %t: nothing of batch 2 was written\n", errors.Is(err, fencing.ErrStale))
	fmt.Printf("its lease, now: %v\n", l.Signal().Err())
	fmt.Println("done")
	return 0
}

// redisServer is a redis-server without persistence on a free loopback
// port.
type redisServer struct {
	cmd  *exec.Cmd
	dir  string
	addr string
}

func startRedis() (*redisServer, error) {
	bin := "/usr/bin/redis-server"
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		bin = b
	}
	dir, err := os.MkdirTemp("", "fencing-demo-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &redisServer{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s (the Debian package redis-server; REDIS_SERVER names another): %w", bin, err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, errors.New("redis-server not ready")
		}
	}
}

func (s *redisServer) close() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}
