package etcdlease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/etcdlease"
)

// lockerLock returns the *etcdlease.Lease that l's Lock grants on subject.
func lockerLock(t *testing.T, l *etcdlease.Locker, subject string) *etcdlease.Lease {
	t.Helper()
	ls, err := l.Lock(t.Context(), subject)
	if err != nil {
		t.Fatal(err)
	}
	return ls.(*etcdlease.Lease)
}

// keysOf returns the keys of the lock named name in etcd.
func keysOf(t *testing.T, op *clientv3.Client, name string) []string {
	t.Helper()
	resp, err := op.Get(t.Context(), name+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// A refused TryLock leaves no key of its own in etcd, and its error names
// the holder's key.
func TestLockerTryLockLeavesNoKey(t *testing.T) {
	srv, op := startEtcdWithOp(t)
	holder := lockerLock(t, etcdlease.NewLocker(newSession(t, srv)), lockName)
	defer holder.Unlock(t.Context())

	ls, err := etcdlease.NewLocker(newSession(t, srv)).TryLock(t.Context(), lockName)
	if !errors.Is(err, lease.ErrHeld) || ls != nil {
		t.Fatalf("TryLock of a held lock = (%v, %v), want an error wrapping lease.ErrHeld", ls, err)
	}
	if !strings.Contains(err.Error(), holder.Key()) {
		t.Errorf("TryLock's error %q does not name the holder's key %q", err, holder.Key())
	}
	if keys := keysOf(t, op, lockName); len(keys) != 1 || keys[0] != holder.Key() {
		t.Errorf("keys of the lock after the refused TryLock = %q, want only the holder's %q", keys, holder.Key())
	}
}

// A key that outlived its lease, because etcd did not answer the release,
// is not taken as the next lease's claim: the next Lock of the session puts
// a key of its own, with a larger token. (An Unlock whose context ended
// sends its release all the same: the stale key is put back by hand, on
// the session's etcd lease, as a release that never arrived leaves it.)
func TestLockerStaleKeyGivesLargerToken(t *testing.T) {
	srv, op := startEtcdWithOp(t)
	s := newSession(t, srv)
	l := etcdlease.NewLocker(s)
	first := lockerLock(t, l, lockName)
	if err := first.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Put(t.Context(), first.Key(), "", clientv3.WithLease(s.Lease())); err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(t, op, lockName); len(keys) != 1 {
		t.Fatalf("keys of the lock after the failed release = %q, want the stale one", keys)
	}

	next := lockerLock(t, l, lockName)
	defer next.Unlock(t.Context())
	if next.Token() <= first.Token() {
		t.Errorf("Token() after a stale key = %d, want more than the stale lease's %d", next.Token(), first.Token())
	}
	if keys := keysOf(t, op, lockName); len(keys) != 1 {
		t.Errorf("keys of the lock = %q, want the new lease's only", keys)
	}
	if err := next.Signal().Err(); err != nil {
		t.Errorf("the new lease: Err() = %v, want nil", err)
	}
}

// A lost lease gives up its turn at the loss: the next Lock of its Locker is
// granted before the lost lease's Unlock, which then leaves the new lease's
// key alone.
func TestLockerLossFreesTurn(t *testing.T) {
	srv, op := startEtcdWithOp(t)
	l := etcdlease.NewLocker(newSession(t, srv))
	lost := lockerLock(t, l, lockName)
	deleteKey(t, op, lost.Key())
	if err := waitLost(t, lost.Signal(), hang); !errors.Is(err, etcdlease.ErrKeyDeleted) {
		t.Fatalf("after the deletion: Err() = %v, want ErrKeyDeleted", err)
	}

	next := lockerLock(t, l, lockName)
	if err := lost.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock of the lost lease = %v", err)
	}
	if keys := keysOf(t, op, lockName); len(keys) != 1 || next.Token() <= lost.Token() {
		t.Errorf("keys after the lost lease's Unlock = %q, Token() = %d; want the new lease's, above %d", keys, next.Token(), lost.Token())
	}
	if err := next.Signal().Err(); err != nil {
		t.Errorf("the new lease, after the lost one's Unlock: Err() = %v, want nil", err)
	}
	if err := next.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// NewLocker panics, naming the call, on a session that cannot be used; a
// Locker refuses the empty subject at once.
func TestLockerMistakes(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"nil session", func() { etcdlease.NewLocker(nil) }, "etcdlease: NewLocker called with a nil session"},
		{"zero Locker", func() { new(etcdlease.Locker).Lock(t.Context(), "x") }, "etcdlease: Lock called with a nil session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if got := recover(); got != tc.want {
					t.Errorf("panic = %v, want %q", got, tc.want)
				}
			}()
			tc.f()
		})
	}

	srv := startEtcd(t)
	l := etcdlease.NewLocker(newSession(t, srv))
	for _, call := range []struct {
		name string
		f    func(context.Context, string) (lease.Lease, error)
	}{{"Lock", l.Lock}, {"TryLock", l.TryLock}} {
		ls, err := call.f(t.Context(), "")
		if want := "etcdlease: " + call.name + ": the empty subject"; ls != nil || err == nil || err.Error() != want {
			t.Errorf(`%s("") = (%v, %v), want (nil, %q)`, call.name, ls, err, want)
		}
	}
}
