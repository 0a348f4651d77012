package pglease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

// waitTimeout bounds the waits of the tests; it guards against a hang, it is
// not a measure.
const waitTimeout = 30 * time.Second

// fast is the configuration of most tests: a loss by silence within a
// second, and a server that drops a silent session after two.
var fast = pglease.Config{Heartbeat: 100 * time.Millisecond, Deadline: time.Second, ServerTimeout: 2 * time.Second}

// sturdy is the configuration of the leases that a test wants kept while it
// faults others: its deadline is one that a loaded machine's scheduling does
// not reach, so that a loss of one of them can only be the fault's.
var sturdy = pglease.Config{Heartbeat: 100 * time.Millisecond, Deadline: 5 * time.Second, ServerTimeout: 10 * time.Second}

// connect returns a connection to s through addr, closed at the end of the
// test.
func connect(t testing.TB, s *pgtest.Server, addr string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := s.Connect(ctx, addr)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// newPool returns a pool of connections to s through addr, closed at the
// end of the test.
func newPool(t testing.TB, s *pgtest.Server, addr string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), s.ConnString(addr))
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// lock takes the lease of subject from pool with cfg, failing the test on an
// error.
func lock(t testing.TB, cfg pglease.Config, pool *pgxpool.Pool, subject string) *pglease.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	l, err := cfg.Lock(ctx, pool, subject)
	if err != nil {
		t.Fatalf("Lock(%q) = %v", subject, err)
	}
	return l
}

// granted is the outcome of a Lock run in the background.
type granted struct {
	lease *pglease.Lease
	err   error
	at    time.Time // when Lock returned
}

// lockAsync starts Lock in a goroutine and returns once the server has put
// a session in the queue of the lock of key.
func lockAsync(t testing.TB, admin *pgx.Conn, cfg pglease.Config, pool *pgxpool.Pool, subject string) <-chan granted {
	t.Helper()
	ch := make(chan granted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		l, err := cfg.Lock(ctx, pool, subject)
		ch <- granted{l, err, time.Now()}
	}()
	waitWaitingOr(t, admin, cfg.Key(subject), ch)
	return ch
}

// waitWaitingOr returns once a backend waits for the advisory lock of key,
// or a Lock of this process waits for it on a shared session, and fails the test if the Lock that should wait returns on ch first; its
// lease, if it was granted, is released.
func waitWaitingOr(t testing.TB, admin *pgx.Conn, key int64, ch <-chan granted) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		err := admin.QueryRow(context.Background(),
			"select count(*) from pg_locks where not granted and "+keyCond(key)).Scan(&n)
		if err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		if n > 0 || pglease.Waiting(key) > 0 {
			return
		}
		select {
		case g := <-ch:
			if g.lease != nil {
				g.lease.Unlock(context.Background())
			}
			t.Fatalf("Lock returned (%v) before it waited for the lock %d", g.err, key)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backend waits for the lock %d after %v", key, waitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// keyCond is the pg_locks condition for the advisory lock of key.
func keyCond(key int64) string {
	u := uint64(key)
	return fmt.Sprintf("locktype = 'advisory' and classid = %d and objid = %d and objsubid = 1", u>>32, u&0xffffffff)
}

// waitWaiting returns once a backend waits for the advisory lock of key.
func waitWaiting(t testing.TB, admin *pgx.Conn, key int64) {
	t.Helper()
	waitWaitingOr(t, admin, key, nil)
}

// waitRowWait returns once a session waits for another's transaction, as a
// write waits for the holder of a row's lock.
func waitRowWait(t testing.TB, admin *pgx.Conn) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		if err := admin.QueryRow(context.Background(),
			"select count(*) from pg_locks where locktype = 'transactionid' and not granted").Scan(&n); err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waits for a row after %v", waitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// holder returns the backend that holds the advisory lock of key, failing
// the test if none does.
func holder(t testing.TB, admin *pgx.Conn, key int64) uint32 {
	t.Helper()
	var pid int32
	if err := admin.QueryRow(context.Background(),
		"select pid from pg_locks where granted and "+keyCond(key)).Scan(&pid); err != nil {
		t.Fatalf("the lock %d is not held in pg_locks: %v", key, err)
	}
	return uint32(pid)
}

// keyLocks returns how many sessions hold or wait for the advisory lock of
// key.
func keyLocks(t testing.TB, admin *pgx.Conn, key int64) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), "select count(*) from pg_locks where "+keyCond(key)).Scan(&n); err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	return n
}

// waitKeyFree returns once no session holds or waits for the lock of key,
// failing the test if that does not come.
func waitKeyFree(t testing.TB, admin *pgx.Conn, key int64) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for keyLocks(t, admin, key) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the lock %d is still held %v later", key, waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitBackendGone returns once backend pid has ended, failing the test if
// that does not come.
func waitBackendGone(t testing.TB, admin *pgx.Conn, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		if err := admin.QueryRow(context.Background(), "select count(*) from pg_stat_activity where pid = $1", int32(pid)).Scan(&n); err != nil {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still runs %v later", pid, waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// terminate ends backend pid with pg_terminate_backend.
func terminate(t testing.TB, admin *pgx.Conn, pid uint32) {
	t.Helper()
	var ok bool
	if err := admin.QueryRow(context.Background(), "select pg_terminate_backend($1)", int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
}

// waitLost returns l's loss, failing the test if it does not come.
func waitLost(t testing.TB, l *pglease.Lease) error {
	t.Helper()
	select {
	case <-l.Signal().Done():
		return l.Signal().Err()
	case <-time.After(waitTimeout):
		t.Fatalf("lease not lost after %v", waitTimeout)
		return nil
	}
}

// waitGranted returns the outcome of a Lock started by lockAsync.
func waitGranted(t testing.TB, ch <-chan granted) granted {
	t.Helper()
	select {
	case g := <-ch:
		return g
	case <-time.After(waitTimeout):
		t.Fatalf("Lock did not return after %v", waitTimeout)
		return granted{}
	}
}

// unlock releases l, failing the test on an error.
func unlock(t testing.TB, l *pglease.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock = %v", err)
	}
}

// isLost reports whether err is the loss of a lease with cause want.
func isLost(err, want error) bool { return err != nil && errors.Is(err, want) }

// The environment of a waiter process (startProcessWaiter).
const (
	waiterAddr    = "PGLEASE_WAITER_ADDR"    // the server's address
	waiterSubject = "PGLEASE_WAITER_SUBJECT" // the subject it locks
	waiterBackOff = "PGLEASE_WAITER_BACKOFF" // set: it tries as Lock does by default
	waiterRounds  = "PGLEASE_WAITER_ROUNDS"  // how many times it locks, each after a line on its input
)

// waiterChild is the body of a waiter process: it locks its subject with
// fast (a 1 s deadline, which a release that nobody announced makes it
// wait) on a pool of its own, trying every millisecond (or backing off as
// Lock does by default, with waiterBackOff), prints "waiting" once its Lock
// waits and, once granted, "granted" and the wall clock in nanoseconds,
// then releases the lease; it does so waiterRounds times, each after a line
// on its input, and exits.
func waiterChild() int {
	if os.Getenv(waiterBackOff) == "" {
		defer pglease.SetPolls(time.Millisecond, time.Millisecond)()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, "postgres://postgres@"+os.Getenv(waiterAddr)+"/postgres?sslmode=disable")
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer pool.Close()
	subject := os.Getenv(waiterSubject)
	rounds, _ := strconv.Atoi(os.Getenv(waiterRounds))
	in := bufio.NewScanner(os.Stdin)
	for range rounds {
		if !in.Scan() {
			return 1
		}
		waited := make(chan struct{})
		go func() {
			defer close(waited)
			for pglease.Waiting(fast.Key(subject)) == 0 {
				time.Sleep(time.Millisecond)
			}
			fmt.Println("waiting")
		}()
		l, err := fast.Lock(ctx, pool, subject)
		at := time.Now()
		<-waited
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("granted", at.UnixNano())
		l.Unlock(ctx)
	}
	return 0
}

// A processWaiter is a process that waits with Lock for a subject, as
// another process of the fleet does, once for each of its rounds.
type processWaiter struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
}

// startProcessWaiters starts a waiter process of rounds rounds for
// subject on s, trying every millisecond unless backOff; the process is
// ended at the end of the test.
func startProcessWaiters(t testing.TB, s *pgtest.Server, subject string, backOff bool, rounds int) *processWaiter {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), waiterAddr+"="+s.Addr(), waiterSubject+"="+subject, waiterRounds+"="+strconv.Itoa(rounds))
	if backOff {
		cmd.Env = append(cmd.Env, waiterBackOff+"=1")
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return &processWaiter{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
}

// wait starts the process's next round and returns once its Lock waits,
// with a channel that receives when its Lock returned (zero if it failed).
func (w *processWaiter) wait(t testing.TB) <-chan time.Time {
	t.Helper()
	if _, err := io.WriteString(w.in, "go\n"); err != nil {
		t.Fatalf("the waiter process: %v", err)
	}
	if !w.lines.Scan() || w.lines.Text() != "waiting" {
		t.Fatalf("the waiter process: %q, want waiting", w.lines.Text())
	}
	ch := make(chan time.Time, 1)
	go func() {
		var at time.Time
		if w.lines.Scan() {
			var ns int64
			if _, err := fmt.Sscanf(w.lines.Text(), "granted %d", &ns); err == nil {
				at = time.Unix(0, ns)
			}
		}
		ch <- at
	}()
	return ch
}

// startProcessWaiter starts a process that waits once with Lock for
// subject on s, trying every millisecond unless backOff, and returns once
// its Lock waits, with a channel that receives when its Lock returned
// (zero if it failed).
func startProcessWaiter(t testing.TB, s *pgtest.Server, subject string, backOff bool) <-chan time.Time {
	t.Helper()
	return startProcessWaiters(t, s, subject, backOff, 1).wait(t)
}
