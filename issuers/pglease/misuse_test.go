package pglease_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/issuers/pglease"
)

var misuseTries = flag.Int("pg.misuse", 100, "tries of TestCallerMisuse (make faults-pg: 1,000)")

// TestCallerMisuse runs, while a lease holds its lock, what a holder's code
// may do with the pool's other connections, which are the caller's and must
// keep working, and with the lease itself: release every advisory lock of
// its session, unlock the lease's key, wait for the same lock with a short
// statement_timeout, DISCARD ALL, reset or drain the pool, terminate the
// pool's other backends, Lock the same subject again with a short context,
// Unlock from two goroutines at once. After each, a lease that is live
// must be held by the server for the lease's own session, and every Unlock
// must release it. No call may panic, in the caller's goroutines or the
// lease's.
func TestCallerMisuse(t *testing.T) {
	admin := connect(t, server, server.Addr())
	ctx := context.Background()
	var adminPID int32
	if err := admin.QueryRow(ctx, "select pg_backend_pid()").Scan(&adminPID); err != nil {
		t.Fatal(err)
	}
	pcfg, err := pgxpool.ParseConfig(server.ConnString(server.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const subject = "misuse"
	key := pglease.Key(subject)
	// The pool's other connections are the caller's: each misuse runs on
	// them and reports its own failure only where the misuse means it.
	actions := []struct {
		name     string
		run      func(l *pglease.Lease, leasePID uint32) error
		releases bool // the action releases the lease
	}{
		{"pg_advisory_unlock_all on the pool", func(*pglease.Lease, uint32) error {
			_, err := pool.Exec(ctx, "select pg_advisory_unlock_all()")
			return err
		}, false},
		{"pg_advisory_unlock of the lease's key on the pool", func(*pglease.Lease, uint32) error {
			var released bool
			err := pool.QueryRow(ctx, "select pg_advisory_unlock($1::bigint)", key).Scan(&released)
			if err == nil && released {
				return fmt.Errorf("another session released the lease's lock")
			}
			return err
		}, false},
		{"the same lock on the pool with a short statement_timeout", func(*pglease.Lease, uint32) error {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release()
			if _, err := c.Exec(ctx, "set statement_timeout = '20ms'"); err != nil {
				return err
			}
			defer c.Exec(ctx, "reset statement_timeout")
			if _, err := c.Exec(ctx, "select pg_advisory_lock($1::bigint)", key); err == nil {
				c.Exec(ctx, "select pg_advisory_unlock($1::bigint)", key)
				return fmt.Errorf("the pool's session was granted the lease's lock")
			}
			return nil
		}, false},
		{"DISCARD ALL on the pool", func(*pglease.Lease, uint32) error {
			_, err := pool.Exec(ctx, "discard all")
			return err
		}, false},
		{"pool.Reset", func(*pglease.Lease, uint32) error {
			pool.Reset()
			return nil
		}, false},
		{"hijack and close every connection the pool gives", func(*pglease.Lease, uint32) error {
			for range pcfg.MaxConns {
				c, err := pool.Acquire(ctx)
				if err != nil {
					return err
				}
				c.Hijack().Close(ctx)
			}
			return nil
		}, false},
		{"pg_terminate_backend of the pool's other backends", func(_ *pglease.Lease, leasePID uint32) error {
			_, err := admin.Exec(ctx, `select pg_terminate_backend(pid) from pg_stat_activity
				where backend_type = 'client backend' and pid not in ($1, $2)`, int32(leasePID), adminPID)
			pool.Reset() // the caller drops the connections it knows are dead
			return err
		}, false},
		{"Lock the same subject with a short context", func(*pglease.Lease, uint32) error {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			if l2, err := fast.Lock(cctx, pool, subject); err == nil {
				l2.Unlock(ctx)
				return fmt.Errorf("a second lease of the same lock was granted in the process")
			}
			return nil
		}, false},
		{"Unlock from two goroutines, then Signal", func(l *pglease.Lease, _ uint32) error {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				wg.Go(func() { errs[i] = l.Unlock(ctx) })
			}
			wg.Wait()
			if errs[0] != errs[1] {
				return fmt.Errorf("two Unlocks returned %v and %v", errs[0], errs[1])
			}
			if err := l.Signal().Err(); err != nil {
				return fmt.Errorf("Err() = %v after Unlock", err)
			}
			return errs[0]
		}, true},
	}
	panics, liveWithoutLock, failures := 0, 0, 0
	for i := range *misuseTries {
		a := actions[i%len(actions)]
		l := lock(t, fast, pool, subject)
		leasePID := holder(t, admin, key)
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					panics++
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return a.run(l, leasePID)
		}()
		if err != nil {
			failures++
			t.Errorf("try %d, %s: %v", i, a.name, err)
		}
		switch {
		case a.releases:
			if n := keyLocks(t, admin, key); n != 0 {
				t.Errorf("try %d, %s: %d sessions hold the lock after Unlock, want 0", i, a.name, n)
			}
		case l.Signal().Err() == nil:
			var pid int32
			err := admin.QueryRow(ctx, "select coalesce((select pid from pg_locks where granted and "+keyCond(key)+"), 0)").Scan(&pid)
			if err != nil {
				t.Fatal(err)
			}
			if l.Signal().Err() == nil && uint32(pid) != leasePID {
				liveWithoutLock++
				t.Errorf("try %d, %s: the lease is live and the lock is held by %d, not its session %d", i, a.name, pid, leasePID)
			}
		default:
			t.Errorf("try %d, %s: the lease was lost: %v", i, a.name, l.Signal().Err())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("try %d, %s: Unlock = %v", i, a.name, err)
		}
		if n := keyLocks(t, admin, key); n != 0 {
			t.Errorf("try %d, %s: %d sessions hold the lock after Unlock, want 0", i, a.name, n)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	var one int
	if err := pool.QueryRow(ctx, "select 1").Scan(&one); err != nil {
		t.Errorf("the pool after the misuse: %v", err)
	}
	t.Logf("%d tries of %d misuses: %d panics, %d live leases without the server's lock, %d failures",
		*misuseTries, len(actions), panics, liveWithoutLock, failures)
}
