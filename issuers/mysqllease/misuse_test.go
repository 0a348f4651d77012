package mysqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/mysqllease"
)

// TestCallerCannotReachTheSession: what the caller does with db's other
// connections does not reach the lease's session: RELEASE_LOCK and
// RELEASE_ALL_LOCKS there release nothing of the lease's, a GET_LOCK there
// waits; two Unlocks at once return one result; closing db leaves the
// lease live, backed, and released by Unlock.
func TestCallerCannotReachTheSession(t *testing.T) {
	admin := rootDB(t, server)
	db, err := sql.Open("mysql", server.DSN("root", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	subj := subject(t)
	l := lock(t, fast, db, subj)
	id := sessionOf(t, admin, l)
	var got sql.NullInt64
	for _, q := range []string{"SELECT RELEASE_LOCK(?)", "SELECT RELEASE_ALL_LOCKS()", "SELECT GET_LOCK(?, 0)"} {
		var args []any
		if q != "SELECT RELEASE_ALL_LOCKS()" {
			args = append(args, subj)
		}
		if err := db.QueryRow(q, args...).Scan(&got); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if got.Int64 == 1 {
			t.Fatalf("%s on the caller's connection = 1: it reached the lease's lock", q)
		}
		if h := holder(t, admin, subj); h != id {
			t.Fatalf("after %s, the lock is held by %d, want the lease's session %d", q, h, id)
		}
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("after %s, the lease was lost: %v", q, err)
		}
	}
	// Two Unlocks at once: one release, the same result for both.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { errs[i] = l.Unlock(context.Background()) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("two Unlocks at once = %v, %v, want nil twice", errs[0], errs[1])
	}

	// Closing the pool does not reach the lease's connection, which is no
	// longer the pool's: the lease stays live and backed by the server, and
	// Unlock, whose KILL QUERY cannot be sent, waits for the heartbeat to
	// end and releases the lock.
	subj2 := subject(t)
	m := lock(t, fast, db, subj2)
	id2 := sessionOf(t, admin, m)
	db.Close()
	time.Sleep(2 * (fast.ServerTimeout - fast.Margin))
	if err := m.Signal().Err(); err != nil {
		t.Fatalf("after db.Close, the lease was lost: %v", err)
	}
	if h := holder(t, admin, subj2); h != id2 {
		t.Fatalf("after db.Close, the lock is held by %d, want the lease's session %d", h, id2)
	}
	if err := m.Unlock(context.Background()); err != nil && !errors.Is(err, mysqllease.ErrSessionEnded) {
		t.Fatalf("Unlock after db.Close = %v, want nil or ErrSessionEnded", err)
	}
	if h := holder(t, admin, subj2); h != 0 {
		t.Fatalf("after Unlock, session %d holds the lock", h)
	}
}
