package pglease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/zukhruf/lease/docs/examples/pglease"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/lost"
)

func TestKeyMatchesSQL(t *testing.T) {
	admin := connect(t, server, server.Addr())
	for _, subject := range []string{"", "orders", "/locks/orders", "ünïcode ✓", strings.Repeat("x", 1000)} {
		var got int64
		if err := admin.QueryRow(context.Background(), "select "+pglease.KeySQL, subject).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := pglease.Key(subject); got != want {
			t.Errorf("KeySQL(%q) = %d, Key = %d", subject, got, want)
		}
	}
}

func TestLockUnlock(t *testing.T) {
	admin := connect(t, server, server.Addr())
	c := connect(t, server, server.Addr())
	if _, err := c.Exec(context.Background(), "set idle_session_timeout = '1h'"); err != nil {
		t.Fatal(err)
	}
	l := lock(t, fast, c, "orders")
	if l.Key() != pglease.Key("orders") {
		t.Errorf("Key() = %d, want %d", l.Key(), pglease.Key("orders"))
	}
	var pid int32
	if err := admin.QueryRow(context.Background(),
		"select pid from pg_locks where locktype = 'advisory' and granted and ((classid::bigint << 32) | objid::bigint) = $1 and objsubid = 1",
		l.Key()).Scan(&pid); err != nil {
		t.Fatalf("the lock is not in pg_locks: %v", err)
	}
	if uint32(pid) != c.PgConn().PID() {
		t.Errorf("lock held by backend %d, want %d", pid, c.PgConn().PID())
	}
	time.Sleep(3 * fast.Deadline) // heartbeats keep it: many deadlines pass, and the server timeout
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("Err() = %v after three deadlines of heartbeats, want nil", err)
	}
	unlock(t, l)
	if n := advisoryLocks(t, admin); n != 0 {
		t.Errorf("%d advisory locks after Unlock, want 0", n)
	}
	var timeout string
	if err := c.QueryRow(context.Background(), "show idle_session_timeout").Scan(&timeout); err != nil {
		t.Fatalf("conn not usable after Unlock: %v", err)
	}
	if timeout != "1h" {
		t.Errorf("idle_session_timeout = %q after Unlock, want the holder's 1h", timeout)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Errorf("second Unlock = %v, want the first's nil", err)
	}
	if err := l.Signal().Err(); err != nil {
		t.Errorf("Err() = %v after Unlock, want nil", err)
	}
}

func TestLostWhenTerminated(t *testing.T) {
	admin := connect(t, server, server.Addr())
	a, b := connect(t, server, server.Addr()), connect(t, server, server.Addr())
	la := lock(t, fast, a, "terminated")
	ch := lockAsync(t, server, admin, fast, b, "terminated")
	terminate(t, admin, a.PgConn().PID())
	err := waitLost(t, la)
	if !isLost(err, pglease.ErrTerminated) {
		t.Errorf("Err() = %v, want ErrTerminated", err)
	}
	var le *lost.Error
	if !errors.As(err, &le) || le.Subject() != "terminated" {
		t.Errorf("Err() = %v, want a *lost.Error on %q", err, "terminated")
	}
	if !strings.Contains(err.Error(), "57P01") {
		t.Errorf("Err() = %v, want what the server said (SQLSTATE 57P01)", err)
	}
	g := waitGranted(t, ch)
	if g.err != nil {
		t.Fatalf("B's Lock = %v", g.err)
	}
	if err := la.Unlock(context.Background()); !isLost(err, pglease.ErrTerminated) {
		t.Errorf("A's Unlock = %v, want the loss", err)
	}
	if !a.IsClosed() {
		t.Errorf("A's conn is open after the loss, want closed")
	}
	unlock(t, g.lease)
}

func TestUnlockThenTerminateNeverLost(t *testing.T) {
	admin := connect(t, server, server.Addr())
	c := connect(t, server, server.Addr())
	l := lock(t, fast, c, "released")
	sig := l.Signal()
	ctx, cancel := sig.Context(context.Background())
	defer cancel()
	ran := make(chan struct{})
	sig.AfterLoss(func() { close(ran) })
	unlock(t, l)
	terminate(t, admin, c.PgConn().PID())
	if _, err := c.Exec(context.Background(), "select 1"); err == nil {
		t.Fatal("the terminated backend still answers")
	}
	time.Sleep(2 * fast.Deadline) // the deadline too would have passed
	if err := sig.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	select {
	case <-sig.Done():
		t.Error("Done closed after Unlock")
	case <-ctx.Done():
		t.Errorf("context cancelled after Unlock: %v", context.Cause(ctx))
	case <-ran:
		t.Error("AfterLoss callback ran after Unlock")
	default:
	}
}

func TestLockCutByContext(t *testing.T) {
	admin := connect(t, server, server.Addr())
	a, b := connect(t, server, server.Addr()), connect(t, server, server.Addr())
	la := lock(t, fast, a, "cut")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := fast.Lock(ctx, b, "cut")
		done <- err
	}()
	waitWaiting(t, admin, b.PgConn().PID())
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock = %v, want context.Canceled", err)
	}
	var waiting int
	if err := admin.QueryRow(context.Background(),
		"select count(*) from pg_locks where locktype = 'advisory' and not granted").Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting != 0 {
		t.Errorf("%d waiters left on the server, want 0", waiting)
	}
	var one int
	if err := b.QueryRow(context.Background(), "select 1").Scan(&one); err != nil {
		t.Errorf("B's conn not usable after the cut wait: %v", err)
	}
	unlock(t, la)
	lb := lock(t, fast, b, "cut")
	unlock(t, lb)
	if n := advisoryLocks(t, admin); n != 0 {
		t.Errorf("%d advisory locks left, want 0", n)
	}
}

func TestLockMisuse(t *testing.T) {
	var nilCtx context.Context // the misuse under test
	c := connect(t, server, server.Addr())
	for name, f := range map[string]func(){
		"nil context": func() { pglease.Lock(nilCtx, c, "x") },
		"nil conn":    func() { pglease.Lock(context.Background(), nil, "x") },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r, _ := recover().(string); !strings.HasPrefix(r, "pglease: Lock called with a nil") {
					t.Errorf("recover() = %q, want a panic naming pglease.Lock", r)
				}
			}()
			f()
		})
	}
	t.Run("Unlock with a nil context", func(t *testing.T) {
		l := lock(t, fast, c, "x")
		defer unlock(t, l)
		defer func() {
			if r, _ := recover().(string); r != "pglease: Unlock called with a nil context" {
				t.Errorf("recover() = %q, want a panic naming pglease.Unlock", r)
			}
		}()
		l.Unlock(nilCtx)
	})
	for name, cfg := range map[string]pglease.Config{
		"heartbeat not shorter than deadline": {Heartbeat: time.Second, Deadline: time.Second},
		"deadline not shorter than timeout":   {Deadline: 10 * time.Second, ServerTimeout: 10 * time.Second},
		"negative":                            {Heartbeat: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := cfg.Lock(context.Background(), c, "x"); err == nil || !strings.HasPrefix(err.Error(), "pglease: lock ") {
				t.Errorf("Lock = %v, want an error from pglease", err)
			}
		})
	}
	t.Run("in a transaction", func(t *testing.T) {
		tx, err := c.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := pglease.Lock(context.Background(), c, "x"); err == nil || !strings.Contains(err.Error(), "transaction") {
			t.Errorf("Lock = %v, want an error saying conn is in a transaction", err)
		}
	})
}

// TestUnlockLeavesOtherLocks checks that a lease releases its own lock only:
// the session's other advisory locks stay.
func TestUnlockLeavesOtherLocks(t *testing.T) {
	admin := connect(t, server, server.Addr())
	c := connect(t, server, server.Addr())
	if _, err := c.Exec(context.Background(), "select pg_advisory_lock(42)"); err != nil {
		t.Fatal(err)
	}
	l := lock(t, fast, c, "beside")
	unlock(t, l)
	if n := advisoryLocks(t, admin); n != 1 {
		t.Errorf("%d advisory locks, want the holder's own 1", n)
	}
	if _, err := c.Exec(context.Background(), "select pg_advisory_unlock(42)"); err != nil {
		t.Fatal(err)
	}
}

// TestUnlockCutByContext releases a lease whose heartbeats' replies are
// still on their way, with a context that ends first: Unlock cannot hand
// the connection back in step with the server, so it closes it, which frees
// the lock; the signal is never lost.
func TestUnlockCutByContext(t *testing.T) {
	proxy, err := faultnet.Listen(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	admin := connect(t, server, server.Addr())
	c := connect(t, server, proxy.Addr())
	l := lock(t, fast, c, "unlock cut")
	proxy.Delay(fast.Deadline / 4) // every heartbeat's reply is in flight for half a second
	time.Sleep(3 * fast.Heartbeat)
	ctx, cancel := context.WithTimeout(context.Background(), fast.Heartbeat/2)
	defer cancel()
	if err := l.Unlock(ctx); err == nil || !strings.HasPrefix(err.Error(), "pglease: unlock ") || !strings.Contains(err.Error(), "heartbeats not answered") {
		t.Errorf("Unlock = %v, want pglease's error saying heartbeats were not answered", err)
	}
	if !c.IsClosed() {
		t.Error("conn open after an Unlock cut by its context, want closed")
	}
	if err := l.Signal().Err(); err != nil {
		t.Errorf("Err() = %v after Unlock, want nil", err)
	}
	proxy.Heal()
	deadline := time.Now().Add(waitTimeout)
	for advisoryLocks(t, admin) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held %v after the connection was closed", waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLostWhenTerminatedWithoutClose terminates the backend of a connection
// whose OnPgError keeps it open after a FATAL error: pgconn then hands the
// error over as a message, and the lease is lost with ErrTerminated all the
// same.
func TestLostWhenTerminatedWithoutClose(t *testing.T) {
	admin := connect(t, server, server.Addr())
	cfg, err := pgx.ParseConfig(server.ConnString(server.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnPgError = func(*pgconn.PgConn, *pgconn.PgError) bool { return true }
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	l := lock(t, fast, c, "kept open")
	terminate(t, admin, c.PgConn().PID())
	if err := waitLost(t, l); !isLost(err, pglease.ErrTerminated) {
		t.Errorf("Err() = %v, want ErrTerminated", err)
	}
	l.Unlock(context.Background())
}
