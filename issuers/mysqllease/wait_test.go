package mysqllease_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/mysqllease"
)

// holdByHandMany takes the locks of names with GET_LOCK by hand on one
// connection of db, as another process's holder, and returns the
// connection, closed at the end of the test.
func holdByHandMany(t *testing.T, db *sql.DB, names []string) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	manyLocks(t, c, "GET_LOCK(?, 0)", names)
	return c
}

// manyLocks runs f (GET_LOCK(?, 0), RELEASE_LOCK(?)) on each of names on
// c, 200 a statement, and fails the test unless every one returns 1.
func manyLocks(t *testing.T, c *sql.Conn, f string, names []string) {
	t.Helper()
	for i := 0; i < len(names); i += 200 {
		part := names[i:min(i+200, len(names))]
		sel := make([]string, len(part))
		args := make([]any, len(part))
		dest := make([]any, len(part))
		got := make([]sql.NullInt64, len(part))
		for j, n := range part {
			sel[j], args[j], dest[j] = f, n, &got[j]
		}
		if err := c.QueryRowContext(context.Background(), "SELECT "+strings.Join(sel, ", "), args...).Scan(dest...); err != nil {
			t.Fatalf("%s by hand: %v", f, err)
		}
		for j, g := range got {
			if g.Int64 != 1 {
				t.Fatalf("%s of %q by hand = %v, want 1", f, part[j], g)
			}
		}
	}
}

// TestWaitsBounded: 1,000 Locks of one pool waiting for locks held
// elsewhere use no more server connections than the shared sessions,
// Config.Waiters sessions of waits, a watcher for each, and the pool's idle
// connections (MaxIdleConns, 2 by default); once the holder releases the
// locks, every one is granted.
func TestWaitsBounded(t *testing.T) {
	const n = 1000
	admin := rootDB(t, server)
	db := rootDB(t, server)
	names := make([]string, n)
	base := subject(t)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", base, i)
	}
	hand := holdByHandMany(t, rootDB(t, server), names)
	threads0 := status(t, admin, "Threads_connected")
	cfg := fast
	bound := 2*(mysqllease.DefaultSessions+mysqllease.DefaultWaiters) + 2

	results := make(chan granted, n)
	for _, name := range names {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			l, err := cfg.Lock(ctx, db, name)
			results <- granted{l, err, time.Now()}
		}()
	}
	var leases []*mysqllease.Lease
	defer func() {
		for _, l := range leases {
			l.Unlock(context.Background())
		}
	}()
	deadline := time.Now().Add(waitTimeout)
	most, settled := int64(0), 0
	for settled < 20 {
		used := status(t, admin, "Threads_connected") - threads0
		most = max(most, used)
		if used > int64(bound) {
			t.Fatalf("%d Locks waiting use %d server connections, over the shared sessions, the sessions of waits, their watchers and the pool's idle ones (%d)", n, used, bound)
		}
		select {
		case g := <-results:
			if g.lease != nil {
				leases = append(leases, g.lease)
			}
			t.Fatalf("a Lock of a held lock returned: %v", g.err)
		default:
		}
		if polled, waiting := mysqllease.Polling(); polled+waiting >= n {
			settled++
		}
		if time.Now().After(deadline) {
			polled, waiting := mysqllease.Polling()
			t.Fatalf("after %v, %d Locks poll and %d wait on sessions of their own, want %d in all", waitTimeout, polled, waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d Locks waiting: at most %d server connections (bound %d)", n, most, bound)
	manyLocks(t, hand, "RELEASE_LOCK(?)", names)
	for range n {
		g := <-results
		if g.err != nil {
			t.Errorf("a waiting Lock = %v", g.err)
			continue
		}
		leases = append(leases, g.lease)
		if err := g.lease.Signal().Err(); err != nil {
			t.Errorf("a granted lease is lost: %v", err)
		}
	}
}

// TestGraceAfterKill: a waiting Lock of another process, on a session of
// its own or polling, granted the lock of a lease whose session was
// killed, returns only after that lease is lost; one granted after an
// Unlock waits no grace.
func TestGraceAfterKill(t *testing.T) {
	for _, polled := range []bool{false, true} {
		t.Run(fmt.Sprintf("polled=%v", polled), func(t *testing.T) {
			admin := rootDB(t, server)
			aDB, bDB := rootDB(t, server), rootDB(t, server)
			defer mysqllease.AsAnotherProcess(bDB)()
			cfg := fast
			if polled {
				cfg.Waiters = 1
				// The one session of waits waits for a lock that is never
				// released, so that B's Lock polls.
				held := subject(t)
				c, _ := rawLock(t, rootDB(t, server), held, time.Second)
				ch := lockAsync(t, admin, cfg, bDB, held)
				defer func() {
					dropConn(c)
					if g := <-ch; g.lease != nil {
						g.lease.Unlock(context.Background())
					}
				}()
			}
			for i := range 10 {
				subj := fmt.Sprintf("%s-%d", subject(t), i)
				a := lock(t, cfg, aDB, subj)
				ch := waitFor(t, admin, cfg, bDB, subj, polled)
				kill := i%2 == 0
				graces0 := mysqllease.Graces()
				if kill {
					mustExec(t, admin, fmt.Sprintf("KILL CONNECTION %d", sessionOf(t, admin, a)))
				} else if err := a.Unlock(context.Background()); err != nil {
					t.Fatalf("Unlock = %v", err)
				}
				g := <-ch
				if g.err != nil {
					t.Fatalf("trial %d: the waiting Lock = %v", i, g.err)
				}
				lostFirst := isClosed(a.Signal().Done())
				g.lease.Unlock(context.Background())
				a.Unlock(context.Background())
				graced := mysqllease.Graces() - graces0
				switch {
				case kill && !lostFirst:
					t.Fatalf("trial %d: B's Lock returned while A, whose session was killed, was live", i)
				case kill && graced == 0:
					t.Fatalf("trial %d: B's Lock waited no grace after A's session was killed", i)
				case !kill && graced != 0:
					t.Fatalf("trial %d: B's Lock waited a grace after A's Unlock", i)
				}
			}
		})
	}
}

// waitFor starts cfg.Lock of subj from db in a goroutine, and returns once
// it waits: in GET_LOCK on a session of its own, or, when polled, among
// the Locks that poll.
func waitFor(t *testing.T, admin *sql.DB, cfg mysqllease.Config, db *sql.DB, subj string, polled bool) <-chan granted {
	t.Helper()
	if !polled {
		return lockAsync(t, admin, cfg, db, subj)
	}
	p0, _ := mysqllease.Polling()
	ch := make(chan granted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		l, err := cfg.Lock(ctx, db, subj)
		ch <- granted{l, err, time.Now()}
	}()
	deadline := time.Now().Add(waitTimeout)
	for {
		if p, _ := mysqllease.Polling(); p > p0 {
			return ch
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Lock of %q does not poll after %v", subj, waitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPolledLockCut: a polling Lock cut by its context returns its
// context's cause and leaves no lock taken; the poller stops.
func TestPolledLockCut(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	cfg := fast
	cfg.Waiters = 1
	held := subject(t)
	c, _ := rawLock(t, rootDB(t, server), held, time.Second)
	defer c.Close()
	first := lockAsync(t, admin, cfg, db, held)
	subj := subject(t)
	name, _ := cfg.LockName(subj)
	rawLock(t, rootDB(t, server), name, time.Second)
	var wg sync.WaitGroup
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		wg.Go(func() {
			defer cancel()
			l, err := cfg.Lock(ctx, db, subj)
			if l != nil {
				l.Unlock(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
				t.Errorf("a polling Lock cut by its context = %v, want its cause", err)
			}
		})
	}
	wg.Wait()
	if p, _ := mysqllease.Polling(); p != 0 {
		t.Fatalf("%d Locks poll after every one was cut", p)
	}
	dropConn(c)
	g := <-first
	if g.err != nil {
		t.Fatalf("the waiting Lock = %v", g.err)
	}
	g.lease.Unlock(context.Background())
}

// dropConn closes c for good, so that the server ends its session and
// frees its locks.
func dropConn(c *sql.Conn) {
	c.Raw(func(any) error { return errBad })
	c.Close()
}
