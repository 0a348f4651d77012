package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/docs/examples/etcdlease"
	"github.com/zukhruf/lease/docs/examples/etcdlease/internal/etcdtest"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

const (
	// ttl is the TTL, in seconds, of every session of these tests.
	ttl = 5
	// hang bounds the waits that only guard against a hang; no test
	// measures it.
	hang = 10 * time.Second
)

// startEtcd starts a real etcd server for one test, in a temporary folder,
// on ports the kernel picks, and stops it when the test ends.
func startEtcd(t *testing.T) *etcdtest.Server {
	t.Helper()
	srv, err := etcdtest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// newClient returns a client of srv, closed when the test ends, before srv
// is stopped.
func newClient(t *testing.T, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// newSession returns a session of ttl seconds on a client of its own; it
// ends when the test ends and its client closes.
func newSession(t *testing.T, srv *etcdtest.Server) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(newClient(t, srv), concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitLost returns the loss of sig, or fails the test if sig is not lost
// within d.
func waitLost(t *testing.T, sig *signal.Signal, d time.Duration) error {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-sig.Done():
		return sig.Err()
	case <-timer.C:
		t.Fatalf("%v: not lost within %v", sig, d)
		return nil
	}
}

// checkLoss checks that err is the loss of the lease on subject, matched
// through a wrap as a holder would, that its cause is want, and that its
// message says words.
func checkLoss(t *testing.T, err error, subject string, want error, words string) {
	t.Helper()
	t.Logf("loss: %v", err)
	wrapped := fmt.Errorf("copy: %w", err)
	var le *lost.Error
	if !errors.As(wrapped, &le) {
		t.Fatalf("Err() = %v, want a *lost.Error", err)
	}
	if le.Subject() != subject {
		t.Errorf("Subject() = %q, want %q", le.Subject(), subject)
	}
	if !errors.Is(wrapped, want) {
		t.Errorf("Err() = %v, want one that matches %v", err, want)
	}
	if !strings.Contains(err.Error(), words) {
		t.Errorf("Err() = %q, want it to say %q", err, words)
	}
}

// checkLive checks that sig was never lost: Err is nil, Done is open, a
// context from the signal is not cancelled and no AfterLoss callback ran.
func checkLive(t *testing.T, sig *signal.Signal, ctx context.Context, fired <-chan struct{}) {
	t.Helper()
	if err := sig.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	select {
	case <-sig.Done():
		t.Error("Done() is closed, want open")
	default:
	}
	if err := context.Cause(ctx); err != nil {
		t.Errorf("context.Cause(sig.Context(...)) = %v, want nil", err)
	}
	select {
	case <-fired:
		t.Error("an AfterLoss callback ran")
	default:
	}
}

// watchKey starts a watch of key from revision rev, for the test to wait
// on what etcd published.
func watchKey(t *testing.T, cli *clientv3.Client, key string, rev int64, opts ...clientv3.OpOption) clientv3.WatchChan {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return cli.Watch(ctx, key, append(opts, clientv3.WithRev(rev))...)
}

// waitEvent waits for an event of type typ on key in events.
func waitEvent(t *testing.T, events clientv3.WatchChan, typ mvccpb.Event_EventType, key string) *clientv3.Event {
	t.Helper()
	timer := time.NewTimer(hang)
	defer timer.Stop()
	for {
		select {
		case wr, ok := <-events:
			if !ok || wr.Err() != nil {
				t.Fatalf("watch ended waiting for %v of %q: %v", typ, key, wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Type == typ && string(ev.Kv.Key) == key {
					return ev
				}
			}
		case <-timer.C:
			t.Fatalf("no %v of %q within %v", typ, key, hang)
		}
	}
}

// sessionKey is the key etcd's recipes make for session s under name.
func sessionKey(name string, s *concurrency.Session) string {
	return fmt.Sprintf("%s/%x", name, s.Lease())
}

type locked struct {
	lease *etcdlease.Lease
	err   error
}

// lockAsync starts Lock in a goroutine and returns where its result goes.
func lockAsync(ctx context.Context, s *concurrency.Session, key string) <-chan locked {
	c := make(chan locked, 1)
	go func() {
		l, err := etcdlease.Lock(ctx, s, key)
		c <- locked{l, err}
	}()
	return c
}

func waitLocked(t *testing.T, c <-chan locked) *etcdlease.Lease {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("Lock: %v", r.err)
		}
		return r.lease
	case <-time.After(hang):
		t.Fatalf("Lock did not return within %v", hang)
		return nil
	}
}

func TestLockLostWhenSessionRevoked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	op := newClient(t, srv)
	s1, s2 := newSession(t, srv), newSession(t, srv)
	const name = "/locks/orders"

	first, err := etcdlease.Lock(ctx, s1, name)
	if err != nil {
		t.Fatal(err)
	}
	sig := first.Signal()
	if first.Key() != sessionKey(name, s1) {
		t.Errorf("Key() = %q, want %q", first.Key(), sessionKey(name, s1))
	}
	// The second holder waits in Lock once its own key is in etcd.
	prefix := watchKey(t, op, name+"/", first.Revision()+1, clientv3.WithPrefix())
	second := lockAsync(ctx, s2, name)
	waitEvent(t, prefix, clientv3.EventTypePut, sessionKey(name, s2))
	if err := sig.Err(); err != nil {
		t.Fatalf("before the revocation: Err() = %v, want nil", err)
	}

	if _, err := op.Revoke(ctx, s1.Lease()); err != nil {
		t.Fatal(err)
	}
	err = waitLost(t, sig, 200*time.Millisecond)
	checkLoss(t, err, name, etcdlease.ErrSessionExpired, "revoked")
	if errors.Is(err, etcdlease.ErrKeyDeleted) {
		t.Errorf("Err() = %v, want it not to match ErrKeyDeleted", err)
	}

	next := waitLocked(t, second)
	if next.Revision() <= first.Revision() {
		t.Errorf("second holder's Revision() = %d, want more than the first's %d", next.Revision(), first.Revision())
	}
	if err := next.Signal().Err(); err != nil {
		t.Errorf("second holder's Err() = %v, want nil", err)
	}
	if err := next.Unlock(ctx); err != nil {
		t.Errorf("second holder's Unlock: %v", err)
	}
	// A release after the loss cleans up in etcd and keeps the loss.
	if err := first.Unlock(ctx); err != nil {
		t.Errorf("Unlock after the loss: %v", err)
	}
	if got := sig.Err(); got != err {
		t.Errorf("after Unlock, Err() = %v, want the loss %v", got, err)
	}
}

func TestLockLostWhenKeyDeleted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	op := newClient(t, srv)
	s := newSession(t, srv)

	l, err := etcdlease.Lock(ctx, s, "/locks/orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	err = waitLost(t, l.Signal(), hang)
	checkLoss(t, err, "/locks/orders", etcdlease.ErrKeyDeleted, "deleted")
	if errors.Is(err, etcdlease.ErrSessionExpired) {
		t.Errorf("Err() = %v, want it not to match ErrSessionExpired: the session lives", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after the loss: %v", err)
	}
}

func TestLockLostWhenKeyTakenOver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	op := newClient(t, srv)
	s := newSession(t, srv)

	l, err := etcdlease.Lock(ctx, s, "/locks/orders")
	if err != nil {
		t.Fatal(err)
	}
	other, err := op.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Put(ctx, l.Key(), "", clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	err = waitLost(t, l.Signal(), hang)
	checkLoss(t, err, "/locks/orders", etcdlease.ErrKeyTakenOver, fmt.Sprintf("etcd lease %x", other.ID))
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after the loss: %v", err)
	}
}

func TestLockLostWhenSessionOrphaned(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	s := newSession(t, srv)

	l, err := etcdlease.Lock(ctx, s, "/locks/orders")
	if err != nil {
		t.Fatal(err)
	}
	// The session stops renewing its etcd lease, which etcd still has.
	s.Orphan()
	err = waitLost(t, l.Signal(), hang)
	checkLoss(t, err, "/locks/orders", etcdlease.ErrSessionClosed, "stopped renewing")
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after the loss: %v", err)
	}
}

func TestLockLostWhenClusterStops(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	cli := newClient(t, srv)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l, err := etcdlease.Lock(ctx, s, "/locks/orders")
	if err != nil {
		t.Fatal(err)
	}
	sig := l.Signal()

	stopped := make(chan struct{})
	go func() {
		srv.Close()
		close(stopped)
	}()
	err = waitLost(t, sig, ttl*time.Second)
	checkLoss(t, err, "/locks/orders", etcdlease.ErrClusterLost, "cluster lost")

	// The server waits for open streams before it stops; the client's end
	// them.
	cli.Close()
	select {
	case <-stopped:
	case <-time.After(3 * hang):
		t.Fatalf("etcd did not stop within %v", 3*hang)
	}
	l.Unlock(ctx) // fails: there is no etcd left to delete the key in
	if got := sig.Err(); got != err {
		t.Errorf("after Unlock, Err() = %v, want the loss %v", got, err)
	}
}

func TestLockLostWhenClientCloses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	s := newSession(t, srv)

	l, err := etcdlease.Lock(ctx, s, "/locks/orders")
	if err != nil {
		t.Fatal(err)
	}
	s.Client().Close()
	err = waitLost(t, l.Signal(), hang)
	checkLoss(t, err, "/locks/orders", etcdlease.ErrClusterLost, "cluster lost")
}

func TestUnlockThenRevokeNeverLost(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	op := newClient(t, srv)
	s := newSession(t, srv)

	l, err := etcdlease.Lock(ctx, s, "/locks/orders")
	if err != nil {
		t.Fatal(err)
	}
	sig := l.Signal()
	sctx, cancel := sig.Context(ctx)
	defer cancel()
	fired := make(chan struct{})
	sig.AfterLoss(func() { close(fired) })
	events := watchKey(t, op, l.Key(), l.Revision())

	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("second Unlock = %v, want the first's nil", err)
	}
	// etcd publishes the deletion the release made, then the revocation
	// ends the session: every event that could lose the lease has happened.
	waitEvent(t, events, clientv3.EventTypeDelete, l.Key())
	if _, err := op.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(hang):
		t.Fatalf("session not done within %v of the revocation", hang)
	}
	checkLive(t, sig, sctx, fired)
}

func TestCampaignLostWhenLeaderKeyDeleted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	op := newClient(t, srv)
	s1, s2 := newSession(t, srv), newSession(t, srv)
	const name = "/elections/orders"

	leader, err := etcdlease.Campaign(ctx, s1, name, "first")
	if err != nil {
		t.Fatal(err)
	}
	if leader.Key() != sessionKey(name, s1) {
		t.Errorf("Key() = %q, want %q", leader.Key(), sessionKey(name, s1))
	}
	// A second candidate waits behind the leader.
	prefix := watchKey(t, op, name+"/", leader.Revision()+1, clientv3.WithPrefix())
	next := make(chan locked, 1)
	go func() {
		l, err := etcdlease.Campaign(ctx, s2, name, "second")
		next <- locked{l, err}
	}()
	waitEvent(t, prefix, clientv3.EventTypePut, sessionKey(name, s2))

	if _, err := op.Delete(ctx, leader.Key()); err != nil {
		t.Fatal(err)
	}
	err = waitLost(t, leader.Signal(), hang)
	checkLoss(t, err, name, etcdlease.ErrKeyDeleted, "deleted")

	second := waitLocked(t, next)
	if second.Revision() <= leader.Revision() {
		t.Errorf("second leader's Revision() = %d, want more than the first's %d", second.Revision(), leader.Revision())
	}
	if err := second.Resign(ctx); err != nil {
		t.Errorf("second leader's Resign: %v", err)
	}
	if err := leader.Resign(ctx); err != nil {
		t.Errorf("Resign after the loss: %v", err)
	}
}

func TestResignNeverLost(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startEtcd(t)
	op := newClient(t, srv)
	s1, s2 := newSession(t, srv), newSession(t, srv)
	const name = "/elections/orders"

	leader, err := etcdlease.Campaign(ctx, s1, name, "first")
	if err != nil {
		t.Fatal(err)
	}
	sig := leader.Signal()
	sctx, cancel := sig.Context(ctx)
	defer cancel()
	fired := make(chan struct{})
	sig.AfterLoss(func() { close(fired) })
	events := watchKey(t, op, leader.Key(), leader.Revision())

	if err := leader.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	waitEvent(t, events, clientv3.EventTypeDelete, leader.Key())
	// Another candidate takes the leadership, and the first session ends.
	second, err := etcdlease.Campaign(ctx, s2, name, "second")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Revoke(ctx, s1.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s1.Done():
	case <-time.After(hang):
		t.Fatalf("session not done within %v of the revocation", hang)
	}
	checkLive(t, sig, sctx, fired)
	if err := second.Resign(ctx); err != nil {
		t.Errorf("second leader's Resign: %v", err)
	}
}
