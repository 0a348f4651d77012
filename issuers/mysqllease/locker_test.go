package mysqllease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/mysqllease"
)

// TestTryLockRefusedByTheProcess: while a lease of this process holds a
// lock whose session the server has ended (the lease has not read it yet),
// a TryLock of the same process that the server grants is refused with
// lease.ErrHeld, without waiting, and gives the grant back; once the
// process's lease is gone, TryLock takes the lock.
func TestTryLockRefusedByTheProcess(t *testing.T) {
	admin := rootDB(t, server)
	subj := subject(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// The record a live lease keeps, with no session holding the lock: the
	// server grants it, the process does not.
	unclaim, err := mysqllease.Claim(ctx, admin, subj)
	if err != nil {
		t.Fatal(err)
	}
	defer unclaim()

	l := mysqllease.NewLocker(rootDB(t, server), fast)
	ls, err := l.TryLock(ctx, subj)
	if !errors.Is(err, lease.ErrHeld) || ls != nil {
		t.Fatalf("TryLock while a lease of the process is live = (%v, %v), want an error wrapping lease.ErrHeld", ls, err)
	}
	if !strings.Contains(err.Error(), "another lease of this process") {
		t.Errorf("TryLock = %v, want the refusal of the process, after the server's grant", err)
	}
	if id := holder(t, admin, subj); id != 0 {
		t.Errorf("after the refused TryLock, session %d holds the lock, want none", id)
	}

	unclaim()
	ls, err = l.TryLock(ctx, subj)
	if err != nil {
		t.Fatalf("TryLock once the process's lease is gone = %v", err)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// TestTryLockHeldByThePool: a session of the pool that already holds the
// lock is the mistake Lock refuses, ErrHeld of this package, and not
// lease.ErrHeld, which would tell the caller to try again.
func TestTryLockHeldByThePool(t *testing.T) {
	db := rootDB(t, server)
	subj := subject(t)
	c, _ := rawLock(t, db, subj, time.Second)
	c.Close() // back to the pool, holding the lock
	ctx, cancel := context.WithTimeout(context.Background(), mistakeTimeout)
	defer cancel()
	_, err := mysqllease.NewLocker(db, fast).TryLock(ctx, subj)
	if !errors.Is(err, mysqllease.ErrHeld) || errors.Is(err, lease.ErrHeld) {
		t.Fatalf("TryLock on a pooled session holding the lock = %v, want mysqllease.ErrHeld and not lease.ErrHeld", err)
	}
}

// TestLockerMisuse: a nil *sql.DB, a Locker not made by NewLocker and a nil
// context panic, naming the call; an error is a nil lease.Lease.
func TestLockerMisuse(t *testing.T) {
	db := rootDB(t, server)
	for name, call := range map[string]func(){
		"NewLocker called with a nil *sql.DB": func() { mysqllease.NewLocker(nil, fast) },
		"a Locker not made by NewLocker":      func() { new(mysqllease.Locker).Lock(context.Background(), "s") },
		"TryLock called with a nil context":   func() { mysqllease.NewLocker(db, fast).TryLock(nilCtx, "s") },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), name) {
					t.Errorf("panic %v, want one naming %q", r, name)
				}
			}()
			call()
		}()
	}
	l := mysqllease.NewLocker(db, fast)
	for call, f := range map[string]func(context.Context, string) (lease.Lease, error){"Lock": l.Lock, "TryLock": l.TryLock} {
		ls, err := f(context.Background(), "")
		if err == nil || ls != nil {
			t.Errorf(`%s("") = (%#v, %v), want a nil Lease and an error`, call, ls, err)
		} else if !strings.Contains(err.Error(), "mysqllease: "+strings.ToLower(call)+" ") {
			t.Errorf(`%s("") = %v, want an error naming the call`, call, err)
		}
	}
}
