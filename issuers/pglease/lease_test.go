package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/lost"
)

// subjects are subjects whose keys the tests compare with SQL's: among them
// ones that are not valid UTF-8 or hold a NUL byte, which a text parameter
// refuses.
var subjects = []string{"", "orders", "/locks/orders", "ünïcode ✓", strings.Repeat("x", 1000), "\xff\xfe not UTF-8", "a\x00b"}

func TestKeyMatchesSQL(t *testing.T) {
	admin := connect(t, server, server.Addr())
	for _, subject := range subjects {
		var got int64
		if err := admin.QueryRow(context.Background(), "select "+pglease.KeySQL, []byte(subject)).Scan(&got); err != nil {
			t.Fatalf("KeySQL(%q): %v", subject, err)
		}
		if want := pglease.Key(subject); got != want {
			t.Errorf("KeySQL(%q) = %d, Key = %d", subject, got, want)
		}
	}
}

func TestKeyedMatchesSQL(t *testing.T) {
	admin := connect(t, server, server.Addr())
	if _, err := admin.Exec(context.Background(), "create extension if not exists pgcrypto"); err != nil {
		t.Fatalf("create extension pgcrypto: %v", err)
	}
	cfg := pglease.Config{Secret: []byte("a secret of the deployment")}
	for _, subject := range subjects {
		var got int64
		if err := admin.QueryRow(context.Background(), "select "+pglease.KeyedSQL, []byte(subject), cfg.Secret).Scan(&got); err != nil {
			t.Fatalf("KeyedSQL(%q): %v", subject, err)
		}
		if want := cfg.Key(subject); got != want {
			t.Errorf("KeyedSQL(%q) = %d, Config.Key = %d", subject, got, want)
		}
		if got == pglease.Key(subject) {
			t.Errorf("Config.Key(%q) with a secret = Key(%q)", subject, subject)
		}
	}
}

// TestKeyCollision: two subjects that share a 64-bit key, found by search,
// share one lock; with a secret they do not.
func TestKeyCollision(t *testing.T) {
	a, b := "subj-66f0332ec10e249a", "subj-cbf1f9e95cb1a442"
	if pglease.Key(a) != pglease.Key(b) {
		t.Fatalf("Key(%q) = %d, Key(%q) = %d: want the documented collision", a, pglease.Key(a), b, pglease.Key(b))
	}
	cfg := pglease.Config{Secret: []byte("s")}
	if cfg.Key(a) == cfg.Key(b) {
		t.Errorf("Config{Secret}.Key(%q) = Config{Secret}.Key(%q) = %d", a, b, cfg.Key(a))
	}
	if (pglease.Config{}).Key(a) != pglease.Key(a) {
		t.Errorf("Config{}.Key(%q) = %d, want Key's %d", a, (pglease.Config{}).Key(a), pglease.Key(a))
	}
}

func TestLockUnlock(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	for _, subject := range []string{"orders", "\xff\xfe not UTF-8", "a\x00b"} {
		l := lock(t, fast, pool, subject)
		if l.Key() != pglease.Key(subject) {
			t.Errorf("Key() = %d, want %d", l.Key(), pglease.Key(subject))
		}
		pid := holder(t, admin, l.Key())
		if n := pool.Stat().TotalConns(); n != 0 {
			t.Errorf("the pool counts %d connections while the lease holds its own, want 0", n)
		}
		if subject == "orders" {
			time.Sleep(3 * fast.Deadline) // heartbeats keep it: many deadlines pass, and the server timeout
		}
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("Err() = %v while held, want nil", err)
		}
		unlock(t, l)
		if n := keyLocks(t, admin, l.Key()); n != 0 {
			t.Errorf("%d advisory locks after Unlock, want 0", n)
		}
		waitBackendGone(t, admin, pid)
		if err := l.Unlock(context.Background()); err != nil {
			t.Errorf("second Unlock = %v, want the first's nil", err)
		}
		if err := l.Signal().Err(); err != nil {
			t.Errorf("Err() = %v after Unlock, want nil", err)
		}
	}
}

func TestLostWhenTerminated(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	la := lock(t, fast, pool, "terminated")
	ch := lockAsync(t, admin, fast, pool, "terminated")
	terminate(t, admin, holder(t, admin, la.Key()))
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
	unlock(t, g.lease)
}

// TestUnlockNeverLost releases a lease and then waits two deadlines: the
// release closed the session, and nothing reaches the signal, its context
// or its callback.
func TestUnlockNeverLost(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	l := lock(t, fast, pool, "released")
	pid := holder(t, admin, l.Key())
	sig := l.Signal()
	ctx, cancel := sig.Context(context.Background())
	defer cancel()
	ran := make(chan struct{})
	sig.AfterLoss(func() { close(ran) })
	unlock(t, l)
	waitBackendGone(t, admin, pid)
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
	pool := newPool(t, server, server.Addr())
	la := lock(t, fast, pool, "cut")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := fast.Lock(ctx, pool, "cut")
		done <- err
	}()
	waitWaiting(t, admin, la.Key())
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock = %v, want context.Canceled", err)
	}
	if n := keyLocks(t, admin, la.Key()); n != 1 {
		t.Errorf("%d sessions hold or wait for the lock after the cut wait, want A's 1", n)
	}
	unlock(t, la)
	lb := lock(t, fast, pool, "cut")
	unlock(t, lb)
	if n := keyLocks(t, admin, la.Key()); n != 0 {
		t.Errorf("%d advisory locks left, want 0", n)
	}
}

// TestLockCutAtEachStep cuts Lock's context at each of its steps, with the
// lock free and with another holder's write holding the fencing row: Lock
// returns the context's error and leaves no lock, no waiter and no
// goroutine, and the pool still serves.
func TestLockCutAtEachStep(t *testing.T) {
	admin := connect(t, server, server.Addr())
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "create table cut_tokens (key bigint primary key, token bigint not null)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(ctx, "drop table cut_tokens") })
	cfg := fast
	cfg.Fence = []string{"cut_tokens"}
	ignore := goleak.IgnoreCurrent()
	for _, step := range []string{pglease.StepAcquire, pglease.StepCheck, pglease.StepSettings, pglease.StepWait, pglease.StepClaim, pglease.StepFence} {
		t.Run(step, func(t *testing.T) {
			pool := newPool(t, server, server.Addr())
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			pglease.SetStepHook(func(_ context.Context, s string) {
				if s == step {
					cancel()
				}
			})
			defer pglease.SetStepHook(nil)
			l, err := cfg.Lock(cctx, pool, "cut at "+step)
			if !errors.Is(err, context.Canceled) {
				if l != nil {
					unlock(t, l)
				}
				t.Fatalf("Lock cut before %s = %v, want context.Canceled", step, err)
			}
			if n := keyLocks(t, admin, cfg.Key("cut at "+step)); n != 0 {
				t.Errorf("%d sessions hold or wait for the lock after Lock was cut before %s, want 0", n, step)
			}
			var one int
			if err := pool.QueryRow(ctx, "select 1").Scan(&one); err != nil {
				t.Errorf("the pool after the cut Lock: %v", err)
			}
			pool.Close()
			pglease.CloseIdleSessions()
			goleak.VerifyNone(t, ignore)
		})
	}
	// The wait for the fencing row, cut while a write's transaction holds it.
	pool := newPool(t, server, server.Addr())
	la := lock(t, cfg, pool, "cut at the row")
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "select token from cut_tokens where key = $1 for share", la.Key()); err != nil {
		t.Fatal(err)
	}
	unlock(t, la)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cfg.Lock(cctx, pool, "cut at the row")
		done <- err
	}()
	other := connect(t, server, server.Addr())
	waitRowWait(t, other)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cut while waiting for the row = %v, want context.Canceled", err)
	}
	if n := keyLocks(t, other, la.Key()); n != 0 {
		t.Errorf("%d sessions hold or wait for the lock after Lock was cut at the row, want 0", n)
	}
}

func TestLockMisuse(t *testing.T) {
	var nilCtx context.Context // the misuse under test
	pool := newPool(t, server, server.Addr())
	for name, tc := range map[string]struct {
		f    func()
		want string
	}{
		"nil context": {func() { pglease.Lock(nilCtx, pool, "x") }, "pglease: Lock called with a nil context"},
		"nil pool":    {func() { pglease.Lock(context.Background(), nil, "x") }, "pglease: Lock called with a nil pool"},
		"zero pool": {func() { pglease.Lock(context.Background(), new(pgxpool.Pool), "x") },
			"pglease: Lock called with a pool not made by pgxpool.New or pgxpool.NewWithConfig"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r, _ := recover().(string); r != tc.want {
					t.Errorf("recover() = %q, want %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
	t.Run("Unlock with a nil context", func(t *testing.T) {
		l := lock(t, fast, pool, "x")
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
			if _, err := cfg.Lock(context.Background(), pool, "x"); err == nil || !strings.HasPrefix(err.Error(), "pglease: lock ") {
				t.Errorf("Lock = %v, want an error from pglease", err)
			}
		})
	}
	t.Run("a closed pool", func(t *testing.T) {
		p := newPool(t, server, server.Addr())
		p.Close()
		if _, err := pglease.Lock(context.Background(), p, "x"); err == nil || !strings.HasPrefix(err.Error(), "pglease: lock ") {
			t.Errorf("Lock = %v, want an error from pglease", err)
		}
	})
	t.Run("a connection that already holds the lock", func(t *testing.T) {
		admin := connect(t, server, server.Addr())
		cfg, err := pgxpool.ParseConfig(server.ConnString(server.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 1
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		// Other code takes the lock on the pool's one connection, and
		// gives the connection back with the lock held.
		if _, err := p.Exec(context.Background(), "select pg_advisory_lock($1::bigint)", pglease.Key("held")); err != nil {
			t.Fatal(err)
		}
		if l, err := fast.Lock(context.Background(), p, "held"); err == nil || !strings.Contains(err.Error(), "already holds the lock") {
			if l != nil {
				unlock(t, l)
			}
			t.Errorf("Lock = %v, want an error saying the session already holds the lock", err)
		}
		// Lock closed the connection it refused, which ends its session and
		// the lock with it, as the server gets to it.
		waitKeyFree(t, admin, pglease.Key("held"))
	})
}

// TestUnlockCutByContext releases a lease alone on its session
// (OwnSession) whose heartbeats' replies are still on their way, with a
// context that ends first: Unlock cannot release the lock in step with the
// server, so it ends the session, which frees the lock, and says so; the
// signal is never lost. (A lease on a shared session sends its release at
// once and waits for its reply, bounded by the session's deadline:
// TestUnlockCancelledContext.)
func TestUnlockCutByContext(t *testing.T) {
	proxy, err := faultnet.Listen(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	admin := connect(t, server, server.Addr())
	own := fast
	own.OwnSession = true
	l := lock(t, own, newPool(t, server, proxy.Addr()), "unlock cut")
	proxy.Delay(fast.Deadline / 4) // every heartbeat's reply is in flight for half a second
	time.Sleep(3 * fast.Heartbeat)
	ctx, cancel := context.WithTimeout(context.Background(), fast.Heartbeat/2)
	defer cancel()
	if err := l.Unlock(ctx); !errors.Is(err, pglease.ErrSessionEnded) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.HasPrefix(err.Error(), "pglease: unlock ") || !strings.Contains(err.Error(), "heartbeats were not answered") {
		t.Errorf("Unlock = %v, want pglease's ErrSessionEnded saying heartbeats were not answered, wrapping the context's error", err)
	}
	if err := l.Signal().Err(); err != nil {
		t.Errorf("Err() = %v after Unlock, want nil", err)
	}
	proxy.Heal()
	waitKeyFree(t, admin, l.Key())
}

// TestUnlockCancelledContext releases leases with a context cancelled
// before the call, as a shutdown's deferred Unlock does: each Unlock either
// released the lock (nil, and the server holds it no more when Unlock
// returns) or ended the session (ErrSessionEnded, and the server frees the
// lock as it sees the session end); the signal is never lost.
func TestUnlockCancelledContext(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	released, ended := 0, 0
	for range 20 {
		l := lock(t, fast, pool, "unlock cancelled")
		time.Sleep(fast.Heartbeat / 2)
		switch err := l.Unlock(ctx); {
		case err == nil:
			released++
			if n := keyLocks(t, admin, l.Key()); n != 0 {
				t.Errorf("Unlock = nil, and %d sessions still hold the lock", n)
			}
		case errors.Is(err, pglease.ErrSessionEnded):
			ended++
			waitKeyFree(t, admin, l.Key())
		default:
			t.Errorf("Unlock with a cancelled context = %v, want nil or ErrSessionEnded", err)
		}
		if err := l.Signal().Err(); err != nil {
			t.Errorf("Err() = %v after Unlock, want nil", err)
		}
	}
	t.Logf("released %d, session ended %d", released, ended)
}

// TestLostWhenTerminatedWithoutClose terminates the backend of a connection
// whose OnPgError keeps it open after a FATAL error: pgconn then hands the
// error over as a message, and the lease is lost with ErrTerminated all the
// same.
func TestLostWhenTerminatedWithoutClose(t *testing.T) {
	admin := connect(t, server, server.Addr())
	cfg, err := pgxpool.ParseConfig(server.ConnString(server.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.OnPgError = func(*pgconn.PgConn, *pgconn.PgError) bool { return true }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l := lock(t, fast, pool, "kept open")
	terminate(t, admin, holder(t, admin, l.Key()))
	if err := waitLost(t, l); !isLost(err, pglease.ErrTerminated) {
		t.Errorf("Err() = %v, want ErrTerminated", err)
	}
	l.Unlock(context.Background())
}

// TestDefaultsDerive: the zero durations of a Config derive from the one it
// sets, in the defaults' ratios, and a Config of a 3 s server timeout, which
// fixed defaults refused, takes a lease.
func TestDefaultsDerive(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg, want pglease.Config
	}{
		"zero":           {pglease.Config{}, pglease.Config{Heartbeat: time.Second, Deadline: 5 * time.Second, ServerTimeout: 10 * time.Second}},
		"server timeout": {pglease.Config{ServerTimeout: 3 * time.Second}, pglease.Config{Heartbeat: 300 * time.Millisecond, Deadline: 1500 * time.Millisecond, ServerTimeout: 3 * time.Second}},
		"long server timeout": {pglease.Config{ServerTimeout: time.Hour},
			pglease.Config{Heartbeat: time.Second, Deadline: 5 * time.Second, ServerTimeout: time.Hour}},
		"deadline":  {pglease.Config{Deadline: 500 * time.Millisecond}, pglease.Config{Heartbeat: 100 * time.Millisecond, Deadline: 500 * time.Millisecond, ServerTimeout: time.Second}},
		"heartbeat": {pglease.Config{Heartbeat: 200 * time.Millisecond}, pglease.Config{Heartbeat: 200 * time.Millisecond, Deadline: time.Second, ServerTimeout: 2 * time.Second}},
		"short deadline": {pglease.Config{Deadline: 30 * time.Millisecond},
			pglease.Config{Heartbeat: pglease.MinHeartbeat, Deadline: 30 * time.Millisecond, ServerTimeout: 60 * time.Millisecond}},
		"short server timeout": {pglease.Config{ServerTimeout: 30 * time.Millisecond},
			pglease.Config{Heartbeat: pglease.MinHeartbeat, Deadline: 15 * time.Millisecond, ServerTimeout: 30 * time.Millisecond}},
		"heartbeat, server timeout": {pglease.Config{Heartbeat: 100 * time.Millisecond, ServerTimeout: 10 * time.Second},
			pglease.Config{Heartbeat: 100 * time.Millisecond, Deadline: 5 * time.Second, ServerTimeout: 10 * time.Second}},
		"heartbeat over the derived deadline": {pglease.Config{Heartbeat: 6 * time.Second, ServerTimeout: 20 * time.Second},
			pglease.Config{Heartbeat: 6 * time.Second, Deadline: 10 * time.Second, ServerTimeout: 20 * time.Second}},
		"heartbeat over half the server timeout": {pglease.Config{Heartbeat: 2 * time.Second, ServerTimeout: 3 * time.Second},
			pglease.Config{Heartbeat: 2 * time.Second, Deadline: 2500 * time.Millisecond, ServerTimeout: 3 * time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := pglease.WithDefaults(tc.cfg)
			if err != nil {
				t.Fatalf("WithDefaults(%+v) = %v", tc.cfg, err)
			}
			if got.Heartbeat != tc.want.Heartbeat || got.Deadline != tc.want.Deadline || got.ServerTimeout != tc.want.ServerTimeout {
				t.Errorf("WithDefaults(%+v) = %v, %v, %v, want %v, %v, %v", tc.cfg, got.Heartbeat, got.Deadline, got.ServerTimeout,
					tc.want.Heartbeat, tc.want.Deadline, tc.want.ServerTimeout)
			}
			if got.Sessions != pglease.DefaultSessions {
				t.Errorf("Sessions = %d, want %d", got.Sessions, pglease.DefaultSessions)
			}
		})
	}
	unlock(t, lock(t, pglease.Config{ServerTimeout: 3 * time.Second}, newPool(t, server, server.Addr()), "derived"))
}

// TestShortDurationHolds: a Config that sets one short duration and leaves
// the others zero takes a lease on the real server that its session
// confirms three times over, and releases it, on a shared session and on a
// session of its own: the derived fields work, none is refused.
func TestShortDurationHolds(t *testing.T) {
	pool := newPool(t, server, server.Addr())
	for name, cfg := range map[string]pglease.Config{
		"deadline 1s":       {Deadline: time.Second},
		"server timeout 2s": {ServerTimeout: 2 * time.Second},
	} {
		for _, own := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s own=%v", name, own), func(t *testing.T) {
				rec := &healthrec.Recorder{}
				cfg.OwnSession, cfg.Observer = own, rec
				l := lock(t, cfg, pool, "short "+t.Name())
				rec.WaitFor(t, health.Renewed, 3)
				if err := l.Signal().Err(); err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				h := l.Health()
				if h.Deadline.Sub(h.Renewed) != time.Second {
					t.Errorf("Health() = %+v, want a deadline 1s after the renewal", h)
				}
				unlock(t, l)
			})
		}
	}
}
