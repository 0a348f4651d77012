package pglease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/pglease"
)

// TestTryLockRefusedByTheProcesssLease has the server grant a TryLock while
// a lease of this process is recorded live on the same lock, as happens
// between the server freeing a lost holder's lock and that holder reading
// why: the TryLock fails with lease.ErrHeld, not a wait, and gives the lock
// back; once the record ends, TryLock grants.
func TestTryLockRefusedByTheProcesssLease(t *testing.T) {
	admin := connect(t, server, server.Addr())
	locker := pglease.NewLocker(newPool(t, server, server.Addr()), fast)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	key := pglease.Key("try-recorded")
	end, err := pglease.Claim(ctx, admin, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(end)
	ls, err := locker.TryLock(ctx, "try-recorded")
	if !errors.Is(err, lease.ErrHeld) || ls != nil {
		if ls != nil {
			ls.Unlock(ctx)
		}
		t.Fatalf("TryLock while the process's lease is live = %v (a lease: %t), want an error wrapping lease.ErrHeld and no lease", err, ls != nil)
	}
	if want := "another lease of this process holds the lock"; !strings.Contains(err.Error(), want) {
		t.Errorf("TryLock's error = %q, want it to say %q", err, want)
	}
	waitKeyFree(t, admin, key)
	end()
	ls, err = locker.TryLock(ctx, "try-recorded")
	if err != nil {
		t.Fatalf("TryLock once the record ended = %v", err)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// TestTryLockLeavesNoWaiter: a TryLock of a lock another session holds is
// refused with lease.ErrHeld and leaves no waiter in pg_locks, whose only
// row for the key is the holder's.
func TestTryLockLeavesNoWaiter(t *testing.T) {
	admin := connect(t, server, server.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	a := lock(t, fast, newPool(t, server, server.Addr()), "try-waiter")
	defer unlock(t, a)
	other := pglease.NewLocker(newPool(t, server, server.Addr()), fast)
	for range 3 {
		ls, err := other.TryLock(ctx, "try-waiter")
		if !errors.Is(err, lease.ErrHeld) || ls != nil {
			if ls != nil {
				ls.Unlock(ctx)
			}
			t.Fatalf("TryLock of a held lock = %v (a lease: %t), want an error wrapping lease.ErrHeld and no lease", err, ls != nil)
		}
		if want := `pglease: trylock "try-waiter": lease: subject is held: another lease of this process holds the lock`; err.Error() != want {
			t.Errorf("TryLock's error = %q, want %q", err, want)
		}
	}
	if n := keyLocks(t, admin, a.Key()); n != 1 {
		t.Errorf("%d sessions hold or wait for the lock after the refused TryLocks, want 1, the holder", n)
	}
	if err := a.Signal().Err(); err != nil {
		t.Errorf("the holder after the refused TryLocks: Err() = %v, want nil", err)
	}
}

// TestLockerMisuse: the Locker refuses the empty subject and a Config out of
// range with a nil lease.Lease, not a nil *Lease in it, and panics naming
// its call on a nil pool or context, as Lock does.
func TestLockerMisuse(t *testing.T) {
	var nilCtx context.Context // the misuse under test
	pool := newPool(t, server, server.Addr())
	locker := pglease.NewLocker(pool, fast)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		f    func()
		want string
	}{
		"NewLocker with a nil pool":  {func() { pglease.NewLocker(nil, fast) }, "pglease: NewLocker called with a nil pool"},
		"NewLocker with a zero pool": {func() { pglease.NewLocker(new(pgxpool.Pool), fast) }, "pglease: NewLocker called with a pool not made by pgxpool.New or pgxpool.NewWithConfig"},
		"Lock with a nil context":    {func() { locker.Lock(nilCtx, "x") }, "pglease: Lock called with a nil context"},
		"TryLock with a nil context": {func() { locker.TryLock(nilCtx, "x") }, "pglease: TryLock called with a nil context"},
		"Lock of a zero Locker":      {func() { new(pglease.Locker).Lock(ctx, "x") }, "pglease: Lock called with a nil pool"},
		"TryLock of a zero Locker":   {func() { new(pglease.Locker).TryLock(ctx, "x") }, "pglease: TryLock called with a nil pool"},
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
	bad := pglease.NewLocker(pool, pglease.Config{Heartbeat: -1})
	for name, tc := range map[string]struct {
		call func() (lease.Lease, error)
		want string
	}{
		"Lock of the empty subject":       {func() (lease.Lease, error) { return locker.Lock(ctx, "") }, "pglease: Lock: the empty subject"},
		"TryLock of the empty subject":    {func() (lease.Lease, error) { return locker.TryLock(ctx, "") }, "pglease: TryLock: the empty subject"},
		"Lock with a Config out of range": {func() (lease.Lease, error) { return bad.Lock(ctx, "x") }, `pglease: lock "x": Config.Heartbeat -1ns is under its floor`},
		"TryLock with a Config out of range": {func() (lease.Lease, error) { return bad.TryLock(ctx, "x") },
			`pglease: trylock "x": Config.Heartbeat -1ns is under its floor`},
	} {
		t.Run(name, func(t *testing.T) {
			ls, err := tc.call()
			if ls != nil {
				t.Errorf("lease = a %T, want a nil lease.Lease", ls)
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("err = %v, want one that starts %q", err, tc.want)
			}
		})
	}
}

// TestLockerKeepsItsConfig: a Locker copies its Config, so that a caller's
// later change to the secret's bytes does not move its keys.
func TestLockerKeepsItsConfig(t *testing.T) {
	admin := connect(t, server, server.Addr())
	cfg := fast
	cfg.Secret = []byte("secret")
	locker := pglease.NewLocker(newPool(t, server, server.Addr()), cfg)
	key := cfg.Key("kept")
	copy(cfg.Secret, "SECRET")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ls, err := locker.Lock(ctx, "kept")
	if err != nil {
		t.Fatalf("Lock = %v", err)
	}
	defer ls.Unlock(ctx)
	if got := ls.(*pglease.Lease).Key(); got != key {
		t.Errorf("Key() = %d, want %d, the key under the secret given to NewLocker", got, key)
	}
	holder(t, admin, key) // fails the test unless a backend holds the lock of key
}
