package mysqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/mysqllease"
)

// lockMany takes the leases of n subjects from db with cfg, from 8
// goroutines, failing the test on an error.
func lockMany(t *testing.T, cfg mysqllease.Config, db *sql.DB, n int) []*mysqllease.Lease {
	t.Helper()
	base := subject(t)
	leases := make([]*mysqllease.Lease, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				l, err := cfg.Lock(ctx, db, fmt.Sprintf("%s-%d", base, i))
				cancel()
				if err != nil {
					errs <- err
					return
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Lock = %v", err)
	}
	return leases
}

// holders returns the session that holds each lease's lock, 0 for none.
func holders(t *testing.T, admin *sql.DB, leases []*mysqllease.Lease) []int64 {
	t.Helper()
	parts := make([]string, len(leases))
	args := make([]any, len(leases))
	for i, l := range leases {
		parts[i] = fmt.Sprintf("SELECT %d AS i, IS_USED_LOCK(?) AS id", i)
		args[i] = l.Name()
	}
	rows, err := admin.Query("SELECT i, id FROM ("+strings.Join(parts, " UNION ALL ")+") AS h", args...)
	if err != nil {
		t.Fatalf("read the holders: %v", err)
	}
	defer rows.Close()
	ids := make([]int64, len(leases))
	for rows.Next() {
		var i int
		var id sql.NullInt64
		if err := rows.Scan(&i, &id); err != nil {
			t.Fatal(err)
		}
		ids[i] = id.Int64
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// distinct returns the distinct values of ids, 0 among them if present.
func distinct(ids []int64) map[int64]int {
	m := make(map[int64]int)
	for _, id := range ids {
		m[id]++
	}
	return m
}

// TestManyLeasesShareSessions is the smoke test of many leases on one
// *sql.DB: 1,000 leases take one shared session (a session holds 1,000
// before a Lock opens another), at most 0.05 goroutines a lease, none lost
// over five heartbeats, and every lock free after the Unlocks.
func TestManyLeasesShareSessions(t *testing.T) {
	const n = 1000
	admin := rootDB(t, server)
	db := rootDB(t, server)
	before := runtime.NumGoroutine()
	leases := lockMany(t, fast, db, n)
	if g := runtime.NumGoroutine() - before; float64(g) > 0.05*n {
		t.Errorf("%d goroutines more for %d leases, want at most %v", g, n, 0.05*n)
	}
	ids := distinct(holders(t, admin, leases))
	if len(ids) != 1 || ids[0] != 0 {
		if _, free := ids[0]; free || len(ids) != 1 {
			t.Fatalf("the %d leases' locks are held by %v (session: leases), want one session holding all", n, ids)
		}
	}
	time.Sleep(5 * fast.Heartbeat)
	for i, l := range leases {
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("lease %d was lost while idle: %v", i, err)
		}
	}
	for i, l := range leases {
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatalf("Unlock of lease %d = %v", i, err)
		}
	}
	if ids := distinct(holders(t, admin, leases)); len(ids) != 1 || ids[0] != n {
		t.Fatalf("after the Unlocks, the locks are held by %v (session: leases), want none", ids)
	}
}

// TestSharedSessionKilled: a KILL CONNECTION of one of two shared sessions
// loses every lease on it with ErrConnLost and none on the other; a Lock of
// the same process waiting for one of the killed leases' locks returns only
// after that lease is lost.
func TestSharedSessionKilled(t *testing.T) {
	defer mysqllease.SetLeasesPerSession(5)()
	admin := rootDB(t, server)
	db := rootDB(t, server)
	cfg := fast
	cfg.Sessions = 2
	leases := lockMany(t, cfg, db, 10)
	ids := holders(t, admin, leases)
	if d := distinct(ids); len(d) != 2 || d[0] != 0 {
		if _, free := d[0]; free || len(d) != 2 {
			t.Fatalf("the 10 leases' locks are held by %v (session: leases), want two sessions", d)
		}
	}
	killed := ids[0]
	var victim *mysqllease.Lease
	for i, l := range leases {
		if ids[i] == killed {
			victim = l
			break
		}
	}
	ch := lockAsync(t, admin, cfg, db, victim.Name()) // the subject is its own name: short, no Secret
	mustExec(t, admin, fmt.Sprintf("KILL CONNECTION %d", killed))
	g := <-ch
	if g.err != nil {
		t.Fatalf("the waiting Lock = %v", g.err)
	}
	defer g.lease.Unlock(context.Background())
	select {
	case <-victim.Signal().Done():
	default:
		t.Fatal("the waiting Lock of the same process returned while the killed lease was live")
	}
	for i, l := range leases {
		if ids[i] != killed {
			continue
		}
		waitLost(t, l)
		if err := l.Signal().Err(); !errors.Is(err, mysqllease.ErrConnLost) {
			t.Errorf("lease %d of the killed session: Err = %v, want ErrConnLost", i, err)
		}
	}
	time.Sleep(2 * fast.Heartbeat)
	for i, l := range leases {
		if ids[i] == killed {
			continue
		}
		if err := l.Signal().Err(); err != nil {
			t.Errorf("lease %d of the other session was lost: %v", i, err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Errorf("Unlock of lease %d of the other session = %v", i, err)
		}
	}
}

// TestSessionsBound: with Config.Sessions 3 and a session full at one
// lease, six leases take three sessions, two each.
func TestSessionsBound(t *testing.T) {
	defer mysqllease.SetLeasesPerSession(1)()
	admin := rootDB(t, server)
	db := rootDB(t, server)
	cfg := fast
	cfg.Sessions = 3
	var leases []*mysqllease.Lease
	for range 6 {
		l := lock(t, cfg, db, subject(t))
		defer l.Unlock(context.Background())
		leases = append(leases, l)
	}
	d := distinct(holders(t, admin, leases))
	if len(d) != 3 {
		t.Fatalf("the 6 leases' locks are held by %v (session: leases), want three sessions", d)
	}
	for id, n := range d {
		if id == 0 || n != 2 {
			t.Fatalf("the 6 leases' locks are held by %v (session: leases), want two on each of three sessions", d)
		}
	}
}

// TestAlone: leases of Config.Alone each take a session of their own, which
// their Unlock ends; leases without it share one.
func TestAlone(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	alone := fast
	alone.Alone = true
	a, b := lock(t, alone, db, subject(t)), lock(t, alone, db, subject(t))
	c, d := lock(t, fast, db, subject(t)), lock(t, fast, db, subject(t))
	ids := holders(t, admin, []*mysqllease.Lease{a, b, c, d})
	if ids[0] == ids[1] || ids[0] == ids[2] || ids[1] == ids[2] {
		t.Errorf("sessions %v: want the two Alone leases on sessions of their own", ids)
	}
	if ids[2] != ids[3] {
		t.Errorf("sessions %v: want the two shared leases on one session", ids)
	}
	for _, l := range []*mysqllease.Lease{a, b, c, d} {
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatalf("Unlock = %v", err)
		}
	}
	// The Alone lease's session ends at its Unlock.
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", ids[0]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Alone lease's session %d is still open %v after its Unlock", ids[0], waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDefaultsScaleWithServerTimeout: a Config that sets ServerTimeout
// alone takes Margin and Heartbeat from it: 2 s and 3 s, which a fixed 5 s
// Margin refused, hold a lease through two of their deadlines, its
// observer told of renewals with the deadline half the ServerTimeout after
// their send.
func TestDefaultsScaleWithServerTimeout(t *testing.T) {
	db := rootDB(t, server)
	for _, timeout := range []time.Duration{2 * time.Second, 3 * time.Second} {
		rec := &healthrec.Recorder{}
		cfg := mysqllease.Config{ServerTimeout: timeout, Observer: rec}
		l := lock(t, cfg, db, subject(t))
		time.Sleep(timeout)
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("ServerTimeout %v: the lease was lost while idle: %v", timeout, err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatalf("ServerTimeout %v: Unlock = %v", timeout, err)
		}
		for _, e := range rec.Events() {
			if e.Kind == health.Renewed && e.Deadline.Sub(e.Sent) != timeout/2 {
				t.Errorf("ServerTimeout %v: renewed with the deadline %v after the send, want %v", timeout, e.Deadline.Sub(e.Sent), timeout/2)
			}
		}
		if n := len(rec.Events()); n < 3 {
			t.Errorf("ServerTimeout %v: %d events, want the grant, renewals and the release: %v", timeout, n, healthrec.Kinds(rec.Events()))
		}
	}
	for _, c := range []mysqllease.Config{{ServerTimeout: time.Second}, {ServerTimeout: 3 * time.Second}, {ServerTimeout: time.Hour}} {
		err := lockErr(t, c, "root@tcp(127.0.0.1:1)/", "s")
		if strings.Contains(err.Error(), "Config.") {
			t.Errorf("Lock with %+v = %v, want a Config it takes (and then a refused connection)", c, err)
		}
	}
}

// TestFenceRowLockedSparesTheSession: a transaction elsewhere that holds the
// fencing row of a subject fails that subject's Lock with the server's lock
// wait timeout (1205), after a quarter of the deadline, and releases its
// lock; the lease beside it on the same shared session lives on, its
// heartbeats not held up past its deadline.
func TestFenceRowLockedSparesTheSession(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	cfg := mysqllease.Config{ServerTimeout: 8 * time.Second, Fence: createFence(t, admin)}
	a := lock(t, cfg, db, subject(t))
	defer a.Unlock(context.Background())
	subj := subject(t)
	tx, err := admin.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("INSERT INTO "+cfg.Fence+" (name, token) VALUES (?, 0) ON DUPLICATE KEY UPDATE token = token", subj); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	l, err := cfg.Lock(ctx, db, subj)
	if l != nil {
		l.Unlock(context.Background())
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("Lock with its fencing row held elsewhere = %v, want the server's 1205", err)
	}
	if id := holder(t, admin, subj); id != 0 {
		t.Fatalf("after the failed Lock, session %d holds its lock", id)
	}
	if err := a.Signal().Err(); err != nil {
		t.Fatalf("the lease beside the failed Lock was lost: %v", err)
	}
	tx.Rollback()
	time.Sleep(time.Second)
	if err := a.Signal().Err(); err != nil {
		t.Fatalf("the lease beside the failed Lock was lost: %v", err)
	}
}

// TestSharedSessionHeldBefore: a pool connection that other code left
// holding a lock, which became a shared session for another subject,
// refuses a Lock of that lock with ErrHeld and leaves the hold as it was;
// the lease on the session lives on.
func TestSharedSessionHeldBefore(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	x := subject(t)
	c, _ := rawLock(t, db, x, time.Second)
	id := holder(t, admin, x)
	c.Close() // back to the pool, holding x
	y := lock(t, fast, db, subject(t))
	defer y.Unlock(context.Background())
	if got := sessionOf(t, admin, y); got != id {
		t.Skipf("the shared session is %d, not the pool's connection %d that holds the lock", got, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if l, err := fast.Lock(ctx, db, x); !errors.Is(err, mysqllease.ErrHeld) {
		if l != nil {
			l.Unlock(context.Background())
		}
		t.Fatalf("Lock of a lock the shared session held before = %v, want ErrHeld", err)
	}
	if got := holder(t, admin, x); got != id {
		t.Fatalf("after the refusal the lock is held by %d, want %d still", got, id)
	}
	var n sql.NullInt64
	if err := admin.QueryRow("SELECT IS_FREE_LOCK(?)", x).Scan(&n); err != nil || n.Int64 != 0 {
		t.Fatalf("IS_FREE_LOCK = %v, %v, want 0", n, err)
	}
	if err := y.Signal().Err(); err != nil {
		t.Fatalf("the lease on the session was lost: %v", err)
	}
}

// TestWaitOnAFullPool: a Lock that must wait, on a pool whose MaxOpenConns
// leaves no room for a session of waits and its watcher beside the shared
// session, its watcher and the caller's connection, polls on the shared
// session, and is granted once the lock is released.
func TestWaitOnAFullPool(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	db.SetMaxOpenConns(4) // the shared session and its watcher, the caller's, one more
	a := lock(t, fast, db, subject(t))
	defer a.Unlock(context.Background())
	y := subject(t)
	c, _ := rawLock(t, rootDB(t, server), y, time.Second)
	done := waitFor(t, admin, fast, db, y, true)
	held, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var got sql.NullInt64
	if err := c.QueryRowContext(context.Background(), "SELECT RELEASE_LOCK(?)", y).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("RELEASE_LOCK = %v, %v", got, err)
	}
	select {
	case g := <-done:
		if g.err != nil {
			t.Fatalf("the waiting Lock = %v", g.err)
		}
		if err := g.lease.Signal().Err(); err != nil {
			t.Fatalf("the waited lease was lost: %v", err)
		}
		g.lease.Unlock(context.Background())
	case <-time.After(waitTimeout):
		t.Fatalf("the waiting Lock did not return %v after the release", waitTimeout)
	}
}
