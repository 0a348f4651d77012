package mysqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/mysqllease"
	"github.com/zukhruf/lease/lost"
)

func TestLockAndUnlock(t *testing.T) {
	db := rootDB(t, server)
	subj := subject(t)
	l := lock(t, fast, db, subj)
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("a new lease's Err = %v, want nil", err)
	}
	if l.Token() != 0 {
		t.Errorf("Token without Fence = %d, want 0", l.Token())
	}
	if l.Name() != subj {
		t.Errorf("Name = %q, want the subject %q", l.Name(), subj)
	}
	if id := holder(t, db, subj); id == 0 {
		t.Fatal("no session holds the lock of a live lease")
	}
	// A few heartbeats, then the release.
	time.Sleep(5 * fast.Heartbeat)
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("the lease was lost while idle: %v", err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock = %v", err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("a second Unlock = %v, want the first's nil", err)
	}
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("after Unlock, Err = %v, want nil: a release never loses the signal", err)
	}
	if id := holder(t, db, subj); id != 0 {
		t.Fatalf("after Unlock, session %d holds the lock", id)
	}
}

// TestMutualExclusion has 3 holders in turn take one lock 100 times each,
// each through a pool of its own, and checks that no two hold it at once
// and that the fencing tokens grow strictly.
func TestMutualExclusion(t *testing.T) {
	const holders, rounds = 3, 100
	admin := rootDB(t, server)
	table := createFence(t, admin)
	cfg := fast
	cfg.Fence = table
	subj := subject(t)
	var inside atomic.Int32
	var mu sync.Mutex
	var tokens []int64
	var wg sync.WaitGroup
	errs := make(chan error, holders)
	for h := range holders {
		db := rootDB(t, server)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				l, err := cfg.Lock(ctx, db, subj)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("holder %d round %d: %w", h, r, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("holder %d round %d: %d holders at once", h, r, n)
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				if err := l.Signal().Err(); err != nil {
					errs <- fmt.Errorf("holder %d round %d: lost: %w", h, r, err)
				}
				inside.Add(-1)
				if err := l.Unlock(context.Background()); err != nil {
					errs <- fmt.Errorf("holder %d round %d: Unlock: %w", h, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(tokens) != holders*rounds {
		t.Fatalf("%d grants, want %d", len(tokens), holders*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d has token %d after %d: tokens must grow strictly", i, tokens[i], tokens[i-1])
		}
	}
}

// TestUnlockHandsOver: a Lock waiting for the lock is granted once the
// holder unlocks.
func TestUnlockHandsOver(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	subj := subject(t)
	a := lock(t, fast, db, subj)
	ch := lockAsync(t, admin, fast, db, subj)
	if err := a.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock = %v", err)
	}
	g := <-ch
	if g.err != nil {
		t.Fatalf("the waiting Lock = %v", g.err)
	}
	defer g.lease.Unlock(context.Background())
	if err := a.Signal().Err(); err != nil {
		t.Fatalf("the released lease is lost: %v", err)
	}
}

// TestKillConnection: a KILL CONNECTION of the lease's session loses it
// with ErrConnLost, and a holder waiting in another session is granted.
func TestKillConnection(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	subj := subject(t)
	a := lock(t, fast, db, subj)
	defer a.Unlock(context.Background())
	id := sessionOf(t, admin, a)
	if _, err := admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		t.Fatal(err)
	}
	waitLost(t, a)
	err := a.Signal().Err()
	var le *lost.Error
	if !errors.As(err, &le) || le.Subject() != subj || !errors.Is(err, mysqllease.ErrConnLost) {
		t.Fatalf("Err = %v, want a lost.Error of %q wrapping ErrConnLost", err, subj)
	}
	b := lock(t, fast, db, subj)
	b.Unlock(context.Background())
	if err := a.Unlock(context.Background()); !errors.Is(err, mysqllease.ErrConnLost) {
		t.Fatalf("Unlock of a lost lease = %v, want the loss", err)
	}
}

// TestKillQuery: a KILL QUERY of the lease's shared session, idle between
// its statements, frees no lock: the lease stays live, or, where the KILL
// met a statement of the session, is lost with ErrKilled, never otherwise.
// A KILL QUERY and then a KILL CONNECTION of the session's watcher start it
// again: the lease stays live, and a new watcher waits.
func TestKillQuery(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	subj := subject(t)
	a := lock(t, fast, db, subj)
	defer a.Unlock(context.Background())
	id := sessionOf(t, admin, a)
	mustExec(t, admin, fmt.Sprintf("KILL QUERY %d", id))
	time.Sleep(2 * fast.Heartbeat)
	if err := a.Signal().Err(); err != nil && !errors.Is(err, mysqllease.ErrKilled) {
		t.Fatalf("after a KILL QUERY of the session, Err = %v, want nil or ErrKilled", err)
	}
	if a.Signal().Err() == nil && holder(t, admin, subj) != id {
		t.Fatalf("after a KILL QUERY of the session, the live lease's lock is held by %d, want %d", holder(t, admin, subj), id)
	}
	if a.Signal().Err() != nil {
		a = lock(t, fast, db, subj)
		defer a.Unlock(context.Background())
	}
	for _, kill := range []string{"QUERY", "CONNECTION"} {
		sid := sessionOf(t, admin, a)
		w := watcher(t, admin, sid)
		if w == 0 {
			t.Fatalf("no watcher waits for the watch lock of session %d", sid)
		}
		mustExec(t, admin, fmt.Sprintf("KILL %s %d", kill, w))
		deadline := time.Now().Add(waitTimeout)
		for next := watcher(t, admin, sid); next == 0 || next == w; next = watcher(t, admin, sid) {
			if time.Now().After(deadline) {
				t.Fatalf("no new watcher waits %v after a KILL %s of the last one", waitTimeout, kill)
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(2 * fast.Heartbeat)
		if err := a.Signal().Err(); err != nil {
			t.Fatalf("after a KILL %s of the watcher, the lease was lost: %v", kill, err)
		}
	}
}

// watcher returns the session of the watcher that waits for the watch lock
// of the session id, 0 if none.
func watcher(t *testing.T, admin *sql.DB, id int64) int64 {
	t.Helper()
	var w sql.NullInt64
	err := admin.QueryRow("SELECT MAX(ID) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('SELECT GET_LOCK(CONVERT(X''', HEX('mysqllease:watch:'), '%')"+
		" AND IS_USED_LOCK(CONVERT(UNHEX(SUBSTRING_INDEX(SUBSTRING_INDEX(INFO, 'X''', -1), '''', 1)) USING utf8mb4)) = ?", id).Scan(&w)
	if err != nil {
		t.Fatal(err)
	}
	return w.Int64
}

// TestLockCut: a Lock waiting for a held lock returns soon after its
// context ends, with an error that matches the context's, and leaves no
// waiter on the server.
func TestLockCut(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	subj := subject(t)
	cfg := mysqllease.Config{Heartbeat: 4 * time.Second, ServerTimeout: 20 * time.Second, Margin: 10 * time.Second}
	a := lock(t, cfg, db, subj)
	defer a.Unlock(context.Background())
	cause := errors.New("the caller gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		l, err := cfg.Lock(ctx, db, subj)
		if l != nil {
			l.Unlock(context.Background())
		}
		done <- err
	}()
	waitWaiting(t, admin, subj, nil)
	cancel(cause)
	select {
	case err := <-done:
		if !errors.Is(err, cause) {
			t.Fatalf("the cut Lock = %v, want an error wrapping the context's cause", err)
		}
	case <-time.After(cfg.Heartbeat):
		t.Fatalf("the cut Lock did not return within a step of its wait (%v)", cfg.Heartbeat)
	}
	// The wait's session was killed: no waiter is left.
	deadline := time.Now().Add(waitTimeout)
	for waiters(t, admin, subj) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a waiter is left on the server %v after the cut", waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSameProcessOrder: when the server frees the lock of a lease killed
// under it, a Lock of the same process waiting for the lock does not
// return before the killed lease is lost.
func TestSameProcessOrder(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	for i := range 20 {
		subj := fmt.Sprintf("%s-%d", subject(t), i)
		a := lock(t, fast, db, subj)
		id := sessionOf(t, admin, a)
		ch := lockAsync(t, admin, fast, db, subj)
		if _, err := admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
			t.Fatal(err)
		}
		g := <-ch
		if g.err != nil {
			t.Fatalf("B's Lock = %v", g.err)
		}
		select {
		case <-a.Signal().Done():
		default:
			t.Fatalf("trial %d: B's Lock returned while A was live", i)
		}
		g.lease.Unlock(context.Background())
		a.Unlock(context.Background())
	}
}

// TestUnlockCancelledContext: an Unlock with a context already cancelled,
// as a shutdown's deferred Unlock has, still releases the lock, 20 of 20.
func TestUnlockCancelledContext(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		subj := fmt.Sprintf("%s-%d", subject(t), i)
		l := lock(t, fast, db, subj)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("try %d: Unlock with a cancelled context = %v, want nil", i, err)
		}
		if id := holder(t, admin, subj); id != 0 {
			t.Fatalf("try %d: session %d holds the lock after Unlock", i, id)
		}
	}
}

// TestUnlockNeverLost: after Unlock, nothing the server does to the old
// session reaches the holder: no error, no closed Done, for two deadlines.
func TestUnlockNeverLost(t *testing.T) {
	db := rootDB(t, server)
	l := lock(t, fast, db, subject(t))
	sig := l.Signal()
	ctx, cancel := sig.Context(context.Background())
	defer cancel()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sig.Done():
		t.Fatal("Done closed after Unlock")
	case <-ctx.Done():
		t.Fatal("the signal's context was cancelled after Unlock")
	case <-time.After(2 * (fast.ServerTimeout - fast.Margin)):
	}
	if err := sig.Err(); err != nil {
		t.Fatalf("Err after Unlock = %v", err)
	}
}

// TestNamesCaseSensitive: MariaDB's GET_LOCK names are case-sensitive, so
// "Ab" and "ab" are two locks (the README says so).
func TestNamesCaseSensitive(t *testing.T) {
	db := rootDB(t, server)
	base := subject(t)
	a := lock(t, fast, db, "Ab-"+base)
	defer a.Unlock(context.Background())
	// A name that collided with A's would wait for A's lock until ctx
	// ended; 10 s is far beyond a free lock's grant, even on a loaded
	// machine.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := fast.Lock(ctx, db, "ab-"+base)
	if err != nil {
		t.Fatalf("Lock of the same name in other case = %v, want a second lock while A holds the first", err)
	}
	b.Unlock(context.Background())
}
