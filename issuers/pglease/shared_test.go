package pglease_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/pglease"
)

var sharedTrials = flag.Int("pg.sharedtrials", 2, "trials of each fault of TestSharedSessionEnded and TestSharedSessionSilent")

// lockMany takes n leases of subjects prefix-0 … prefix-(n-1) from pool with
// cfg, 16 at a time, released at the end of the test.
func lockMany(t *testing.T, cfg pglease.Config, pool *pgxpool.Pool, prefix string, n int) []*pglease.Lease {
	t.Helper()
	leases := make([]*pglease.Lease, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	const workers = 16
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				l, err := cfg.Lock(ctx, pool, fmt.Sprintf("%s-%d", prefix, i))
				cancel()
				if err != nil {
					errs <- err
					return
				}
				leases[i] = l
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, l := range leases {
			if l != nil {
				l.Unlock(context.Background())
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatalf("Lock = %v", err)
	}
	return leases
}

// lockHolders returns the server process that holds each advisory lock, by
// key.
func lockHolders(t *testing.T, admin *pgx.Conn) map[int64]uint32 {
	t.Helper()
	rows, err := admin.Query(context.Background(), "select pid, classid::bigint, objid::bigint from pg_locks where locktype = 'advisory' and granted and objsubid = 1")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[int64]uint32)
	for rows.Next() {
		var pid int32
		var hi, lo int64
		if err := rows.Scan(&pid, &hi, &lo); err != nil {
			t.Fatal(err)
		}
		m[int64(uint64(hi)<<32|uint64(lo))] = uint32(pid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// lossTimes waits for the loss of each of leases and returns when each was
// seen, failing the test if one is not lost within waitTimeout.
func lossTimes(t *testing.T, leases []*pglease.Lease) []time.Time {
	t.Helper()
	at := make([]time.Time, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-l.Signal().Done():
				at[i] = time.Now()
			case <-time.After(waitTimeout):
			}
		}()
	}
	wg.Wait()
	for i, a := range at {
		if a.IsZero() {
			t.Fatalf("lease %d of %d on the ended session not lost after %v", i, len(leases), waitTimeout)
		}
	}
	return at
}

// TestSharedSessionEnded holds 1,000 leases from one pool, 250 on each of
// four shared sessions, while another process waits for the lock of one of
// them with pg_advisory_lock, and a Lock in another process waits for the
// lock of another, trying it every millisecond, and terminates the server
// process of one session: each of its leases is lost with ErrTerminated,
// and no lease of the other sessions is lost; the other process's Lock
// returns only once the lease that held its lock is lost. It logs how long
// after pg_terminate_backend returned the last of them was seen lost, and
// whether the plain waiter was granted before its lock's lease was seen lost
// (the race of the README's terminate row, which no client wins).
func TestSharedSessionEnded(t *testing.T) {
	defer pglease.SetLeasesPerSession(250)()
	defer pglease.SetPolls(time.Millisecond, time.Millisecond)() // the waiter tries as soon as the server frees the lock
	admin := connect(t, server, server.Addr())
	var detect, waits []time.Duration
	raced, early := 0, 0
	var overlap time.Duration
	for trial := range *sharedTrials {
		pool := newPool(t, server, server.Addr())
		prefix := fmt.Sprintf("ended-%d", trial)
		leases := lockMany(t, sturdy, pool, prefix, 1000) // a push ends them, not the deadline
		holders := lockHolders(t, admin)
		victim := holders[leases[0].Key()]
		var on, off []*pglease.Lease
		second := -1 // another lease on the victim's session, whose lock a Lock waits for
		for i, l := range leases {
			if holders[l.Key()] == victim {
				on = append(on, l)
				if i > 0 && second < 0 {
					second = i
				}
			} else {
				off = append(off, l)
			}
		}
		if len(on) < 200 || len(on) > 400 {
			// A session takes Locks up to 250 users, the leases and the
			// Locks under way among them, so it may end up with more.
			t.Errorf("%d leases on the session of the first, want about 250 of 1,000 on 4 sessions", len(on))
		}
		b := connect(t, server, server.Addr())
		granted := make(chan time.Time, 1)
		go func() {
			_, err := b.Exec(context.Background(), "select pg_advisory_lock($1)", leases[0].Key())
			if err != nil {
				t.Errorf("B's pg_advisory_lock: %v", err)
			}
			granted <- time.Now()
		}()
		waitWaiting(t, admin, leases[0].Key())
		old := leases[second]
		oldLost := make(chan time.Time, 1)
		go func() {
			<-old.Signal().Done()
			oldLost <- time.Now()
		}()
		ours := startProcessWaiter(t, server, fmt.Sprintf("%s-%d", prefix, second), false)
		terminate(t, admin, victim)
		returned := time.Now()
		at := lossTimes(t, on)
		g := <-granted
		if g.Before(at[0]) {
			raced++
			overlap = max(overlap, at[0].Sub(g))
		}
		o := <-ours
		if o.IsZero() {
			t.Fatal("the waiter process was not granted")
		}
		if ol := <-oldLost; o.Before(ol) {
			early++
			t.Errorf("trial %d: the waiter process was granted %v before the lease that held its lock was lost", trial, ol.Sub(o))
		}
		waits = append(waits, o.Sub(returned))
		for _, l := range on {
			if err := l.Signal().Err(); !isLost(err, pglease.ErrTerminated) {
				t.Errorf("a lease on the ended session: Err() = %v, want ErrTerminated", err)
			}
		}
		detect = append(detect, slices.MaxFunc(at, func(a, b time.Time) int { return a.Compare(b) }).Sub(returned))
		time.Sleep(3 * sturdy.Heartbeat) // the other sessions' heartbeats go on
		for _, l := range off {
			if err := l.Signal().Err(); err != nil {
				t.Errorf("a lease on another session: Err() = %v, want nil", err)
			}
		}
		if _, err := b.Exec(context.Background(), "select pg_advisory_unlock_all()"); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(waits)
	t.Logf("%d trials, about 250 leases on the ended session of 4: all lost; the last seen lost after pg_terminate_backend returned, max %v; "+
		"the pg_advisory_lock waiter granted before its lock's lease was seen lost in %d trials, by at most %v; "+
		"the Lock of another process returned before its lock's lease was lost in %d trials, and after pg_terminate_backend returned, median %v, max %v",
		len(detect), slices.Max(detect).Round(time.Microsecond), raced, overlap.Round(time.Microsecond),
		early, waits[len(waits)/2].Round(time.Microsecond), waits[len(waits)-1].Round(time.Microsecond))
}

// TestSharedSessionSilent holds 1,000 leases of a pool whose connections go
// through a proxy, on one shared session, and 100 of a pool connected
// directly, and makes the proxy silent both ways: every lease of the first
// is lost with ErrUnresponsive, no sooner than Deadline after the last
// heartbeat its session answered, and none of the second.
func TestSharedSessionSilent(t *testing.T) {
	var detect []time.Duration
	for trial := range *sharedTrials {
		proxy, err := faultnet.Listen(server.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		silent := lockMany(t, fast, newPool(t, server, proxy.Addr()), fmt.Sprintf("silent-%d", trial), 1000)
		direct := lockMany(t, sturdy, newPool(t, server, server.Addr()), fmt.Sprintf("direct-%d", trial), 100)
		proxy.Drop(faultnet.Both)
		from := time.Now()
		at := lossTimes(t, silent)
		for _, l := range silent {
			if err := l.Signal().Err(); !isLost(err, pglease.ErrUnresponsive) {
				t.Fatalf("a lease on the silent session: Err() = %v, want ErrUnresponsive", err)
			}
		}
		detect = append(detect, slices.MaxFunc(at, func(a, b time.Time) int { return a.Compare(b) }).Sub(from))
		for _, l := range direct {
			if err := l.Signal().Err(); err != nil {
				t.Errorf("a lease on another pool's session: Err() = %v, want nil", err)
			}
		}
		proxy.Heal()
	}
	t.Logf("%d trials, 1,000 leases on the silent session: all lost, the last within %v of the silence (deadline %v); none of the 100 on another session",
		len(detect), slices.Max(detect).Round(time.Millisecond), fast.Deadline)
}

// TestLockWaitKeepsHeartbeats: a Lock that waits for a lock held by another
// session, for three deadlines, on the shared session of a live lease,
// holds no statement on the server, so the lease's heartbeats go on and it
// is not lost; the Lock is granted once the other session releases.
func TestLockWaitKeepsHeartbeats(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	a := lock(t, fast, pool, "keeps heartbeats")
	defer unlock(t, a)
	other := connect(t, server, server.Addr())
	if _, err := other.Exec(context.Background(), "select pg_advisory_lock($1)", fast.Key("held by hand")); err != nil {
		t.Fatal(err)
	}
	ch := lockAsync(t, admin, fast, pool, "held by hand")
	time.Sleep(3 * fast.Deadline)
	if err := a.Signal().Err(); err != nil {
		t.Fatalf("the lease beside a waiting Lock: Err() = %v, want nil", err)
	}
	if n := keyLocks(t, admin, fast.Key("held by hand")); n != 1 {
		t.Errorf("%d sessions hold or wait for the lock, want 1, the holder: a waiting Lock leaves no waiter on the server", n)
	}
	// A release by hand sends no notify: the waiter's next try takes it.
	if _, err := other.Exec(context.Background(), "select pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	g := waitGranted(t, ch)
	if g.err != nil {
		t.Fatalf("the waiting Lock = %v", g.err)
	}
	if holder(t, admin, g.lease.Key()) != holder(t, admin, a.Key()) {
		t.Errorf("the waiting Lock's lease is not on the shared session of the other lease")
	}
	unlock(t, g.lease)
}

// TestUnlockWakesWaiter: a lease's Unlock announces its release, and a
// Lock that waits for the lock in another process, backed off to its
// longest wait, is granted at once, not at its next try, and without the
// wait for an unannounced release; the test logs the hand-overs' median and
// max over 20 rounds, from the call of Unlock to the return of the other
// process's Lock.
func TestUnlockWakesWaiter(t *testing.T) {
	pa := newPool(t, server, server.Addr())
	w := startProcessWaiters(t, server, "hand-over", true, 20)
	var lags []time.Duration
	for range 20 {
		a := lock(t, fast, pa, "hand-over")
		ch := w.wait(t)
		// Let the waiter's tries back off to their longest wait first.
		time.Sleep(time.Second)
		released := time.Now()
		unlock(t, a)
		at := <-ch
		if at.IsZero() {
			t.Fatal("the waiter process was not granted")
		}
		lags = append(lags, at.Sub(released))
	}
	slices.Sort(lags)
	t.Logf("hand-over after Unlock to another process: median %v, max %v (20 rounds, waiters backed off to their longest wait)", lags[len(lags)/2].Round(time.Microsecond), lags[len(lags)-1].Round(time.Microsecond))
}

// TestLockCycleDialsNothing: after a first Lock has opened the pool's
// shared session, 500 Lock→Unlock cycles of distinct subjects dial no
// connection, so start no backend.
func TestLockCycleDialsNothing(t *testing.T) {
	var c dialCounter
	pool := c.pool(t, server.ConnString(server.Addr()), nil)
	unlock(t, lock(t, fast, pool, "warm-up"))
	warm := c.n.Load()
	for i := range 500 {
		unlock(t, lock(t, fast, pool, fmt.Sprintf("cycle-%d", i)))
	}
	if n := c.n.Load() - warm; n != 0 {
		t.Errorf("%d connections dialed by 500 cycles after the warm-up, want 0", n)
	}
}

// TestSessionsBounded: Config.Sessions bounds the shared sessions of a
// pool's leases, and OwnSession gives a lease a session of its own beside
// them.
func TestSessionsBounded(t *testing.T) {
	defer pglease.SetLeasesPerSession(10)()
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	cfg := fast
	cfg.Sessions = 2
	leases := lockMany(t, cfg, pool, "bounded", 50)
	holders := lockHolders(t, admin)
	pids := map[uint32]int{}
	for _, l := range leases {
		pids[holders[l.Key()]]++
	}
	if len(pids) != 2 {
		t.Errorf("50 leases on %d sessions (%v), want 2, the bound", len(pids), pids)
	}
	own := fast
	own.OwnSession = true
	alone := lock(t, own, pool, "alone")
	defer unlock(t, alone)
	if p := holder(t, admin, alone.Key()); pids[p] != 0 {
		t.Errorf("an OwnSession lease on the shared session %d", p)
	}
	cfg.Sessions = -1
	if _, err := cfg.Lock(context.Background(), pool, "negative"); err == nil || !errors.Is(err, err) || err.Error() == "" {
		t.Errorf("Lock with Sessions -1 = %v, want an error", err)
	}
}

// BenchmarkLockCycle is Lock then Unlock of a free subject from one
// goroutine, beside pg_advisory_lock and pg_advisory_unlock by hand on a
// pooled connection: go test -run '^$' -bench LockCycle.
func BenchmarkLockCycle(b *testing.B) {
	pool := newPool(b, server, server.Addr())
	ctx := context.Background()
	b.Run("impl=pglease", func(b *testing.B) {
		b.ReportAllocs()
		var cfg pglease.Config
		i := 0
		for b.Loop() {
			l, err := cfg.Lock(ctx, pool, fmt.Sprintf("bench-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("impl=byhand", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			key := pglease.Key(fmt.Sprintf("bench-%d", i))
			c, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Exec(ctx, "select pg_advisory_lock($1)", key); err != nil {
				b.Fatal(err)
			}
			var ok bool
			if err := c.QueryRow(ctx, "select pg_advisory_unlock($1)", key).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
			c.Release()
			i++
		}
	})
}

// TestUnlockKeepsSessionWhenNotifyFails: an Unlock whose announcement to a
// marked waiter fails (NOTIFY's commit waits for a lock of the whole server,
// which many releases at once can hold past a shared session's lock_timeout)
// has still released the lock: it returns nil, ends no session, loses no other lease on it, and
// the waiter is granted.
func TestUnlockKeepsSessionWhenNotifyFails(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pa, pb := newPool(t, server, server.Addr()), newPool(t, server, server.Addr())
	beside := lockMany(t, sturdy, pa, "beside a failed notify", 10)
	a := lock(t, sturdy, pa, "failed notify")
	ch := lockAsync(t, admin, sturdy, pb, "failed notify")
	// The mark of a waiter of another process, so that the release is
	// announced.
	key := sturdy.Key("failed notify")
	if _, err := admin.Exec(context.Background(), "select pg_advisory_lock_shared($1, $2)", int32(key>>32), int32(key)); err != nil {
		t.Fatal(err)
	}
	restore := pglease.SetNotifyCall("pg_catalog.pg_notify('pglease', (1/0)::text)") // division by zero, whenever it is planned
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := a.Unlock(ctx); err != nil {
		t.Errorf("Unlock with a failed notify = %v, want nil: the lock was released", err)
	}
	g := waitGranted(t, ch)
	if g.err != nil {
		t.Fatalf("the waiting Lock = %v", g.err)
	}
	for _, l := range beside {
		if err := l.Signal().Err(); err != nil {
			t.Errorf("a lease on the session of the failed notify: Err() = %v, want nil", err)
		}
	}
	restore()
	unlock(t, g.lease)
	for _, l := range beside {
		unlock(t, l)
	}
}

// TestUnknownStatementEndsSession: a prepared statement of the lock cycle
// that the server session does not know (run in another server session, or
// deallocated under the issuer) ends the shared session with ErrPooled, and
// loses the leases on it: the session is not the one that prepared it.
func TestUnknownStatementEndsSession(t *testing.T) {
	pool := newPool(t, server, server.Addr())
	a := lock(t, fast, pool, "beside an unknown statement")
	restore := pglease.SetTryStatement("pglease_unknown")
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if l, err := fast.Lock(ctx, pool, "unknown statement"); !errors.Is(err, pglease.ErrPooled) {
		if err == nil {
			l.Unlock(ctx)
		}
		t.Fatalf("Lock through an unknown prepared statement = %v, want ErrPooled at once", err)
	}
	restore()
	if err := waitLost(t, a); !isLost(err, pglease.ErrPooled) {
		t.Errorf("the lease on the session: Err() = %v, want ErrPooled", err)
	}
}

// TestWaiterWaitsForEndedHolder: a holder farther from the server than a
// waiter (its connection's bytes delayed 30 ms each way at a proxy) has its
// shared session terminated; the server frees the lock at once, and the
// waiter, a Lock in another process that tries every millisecond, finds it
// free about 30 ms before the holder can read the end. The waiter's Lock
// must not return before the holder's lease is lost: a release that no
// Unlock announced makes it wait for the holder's process (a deadline, cut
// short by an announcement).
func TestWaiterWaitsForEndedHolder(t *testing.T) {
	admin := connect(t, server, server.Addr())
	const delay = 30 * time.Millisecond
	early := 0
	var worst time.Duration
	for trial := range *sharedTrials {
		proxy, err := faultnet.Listen(server.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		subject := fmt.Sprintf("ended holder %d", trial)
		a := lock(t, sturdy, newPool(t, server, proxy.Addr()), subject)
		lost := make(chan time.Time, 1)
		go func() {
			<-a.Signal().Done()
			lost <- time.Now()
		}()
		grantedAt := startProcessWaiter(t, server, subject, false)
		victim := holder(t, admin, a.Key())
		proxy.Delay(delay)
		terminate(t, admin, victim)
		g := <-grantedAt
		if g.IsZero() {
			t.Fatal("the waiter process was not granted")
		}
		l := <-lost
		if g.Before(l) {
			early++
			worst = max(worst, l.Sub(g))
		}
		if err := a.Signal().Err(); !isLost(err, pglease.ErrTerminated) {
			t.Errorf("the ended holder: Err() = %v, want ErrTerminated", err)
		}
		proxy.Heal()
	}
	if early > 0 {
		t.Errorf("in %d of %d trials the waiter process was granted before the ended holder's lease was lost, by at most %v", early, *sharedTrials, worst)
	}
}

// TestLockCutInUnannouncedWait: a Lock granted after a release by hand,
// which nobody announced, waits a deadline before it returns; cut by its
// context in that wait, it returns the context's error and gives the lock
// back.
func TestLockCutInUnannouncedWait(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	key := fast.Key("cut in the wait")
	other := connect(t, server, server.Addr())
	if _, err := other.Exec(context.Background(), "select pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan error, 1)
	go func() {
		l, err := fast.Lock(ctx, pool, "cut in the wait")
		if err == nil {
			l.Unlock(context.Background())
		}
		ch <- err
	}()
	for pglease.Waiting(key) == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := other.Exec(context.Background(), "select pg_advisory_unlock($1)", key); err != nil {
		t.Fatal(err)
	}
	// The Lock's session takes the lock at its next try, and waits.
	for keyLocks(t, admin, key) == 0 {
		select {
		case err := <-ch:
			t.Fatalf("Lock returned %v before it was cut, in its wait for the announcement", err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cut in its wait = %v, want context.Canceled", err)
	}
	waitKeyFree(t, admin, key)
}
