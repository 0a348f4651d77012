package redislease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/redislease"
)

// TestLockerRefuses: what a Locker refuses at once, with an error that names
// the call and the rule, and a nil Lease interface.
func TestLockerRefuses(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		locker  *redislease.Locker
		subject string
		want    string
	}{
		{"zero Locker", &redislease.Locker{}, keyName(t), "nil client"},
		{"empty subject", redislease.NewLocker(client(t, shared.Addr()), short), "", ": the empty subject"},
		{"'}' without a hash tag", redislease.NewLocker(client(t, shared.Addr()), short), "a}b", "hash tag"},
		{"invalid Config", redislease.NewLocker(client(t, shared.Addr()), redislease.Config{TTL: -1}), keyName(t), "TTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for call, lock := range map[string]func(context.Context, string) (lease.Lease, error){
				"Lock":    tc.locker.Lock,
				"TryLock": tc.locker.TryLock,
			} {
				ls, err := lock(ctx, tc.subject)
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(call)) {
					t.Errorf("%s(%q) = %v, want an error naming %s and %q", call, tc.subject, err, call, tc.want)
				}
				if ls != nil {
					t.Errorf("%s(%q) returned a non-nil Lease %#v with its error", call, tc.subject, ls)
				}
			}
		})
	}
}

// TestTryLockClaim: after an operator's DEL of a held key, the key's claim
// keeps it from others until the holder's Unlock gives it back, for TryLock
// as for Lock; a refused TryLock writes nothing.
func TestTryLockClaim(t *testing.T) {
	ctx := t.Context()
	key := keyName(t)
	op := client(t, shared.Addr())
	a := redislease.NewLocker(client(t, shared.Addr()), short)
	b := redislease.NewLocker(client(t, shared.Addr()), short)
	held, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock(%s) = %v", key, err)
	}
	if err := op.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := waitLost(t, held.(*redislease.Lease), lossWithin); !errors.Is(err, redislease.ErrDeleted) {
		t.Fatalf("Err() = %v, want ErrDeleted", err)
	}
	claim := "{" + key + "}:redislease-claim"
	before, err := op.Get(ctx, claim).Result()
	if err != nil {
		t.Fatalf("GET %s = %v", claim, err)
	}
	if ls, err := b.TryLock(ctx, key); !errors.Is(err, lease.ErrHeld) || ls != nil {
		t.Fatalf("TryLock(%s) while the lost holder's claim lives = (%v, %v), want lease.ErrHeld", key, ls, err)
	}
	if n := op.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("a refused TryLock wrote the key: EXISTS = %d", n)
	}
	if after := op.Get(ctx, claim).Val(); after != before {
		t.Errorf("a refused TryLock changed the claim from %q to %q", before, after)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	next, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock(%s) after the lost holder's Unlock = %v", key, err)
	}
	if next.Token() <= held.Token() {
		t.Errorf("Token() = %d, want above the last holder's %d", next.Token(), held.Token())
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
}
