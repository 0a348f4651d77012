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

	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

const (
	// ttl is the TTL, in seconds, of most sessions of these tests.
	ttl = 5
	// longTTL is the TTL, in seconds, of a session whose revocation must
	// reach its lease as the deletion of the key: the lease renews every
	// TTL/6 and the session's client every TTL/3, and a renewal answered
	// after the revocation would tell the loss first, as ErrSessionExpired
	// or ErrSessionClosed. etcd's own default.
	longTTL = 60
	// hang bounds the waits that only guard against a hang; no test
	// measures it.
	hang = 10 * time.Second

	// The lock and the election the tests claim.
	lockName     = "/locks/orders"
	electionName = "/elections/orders"
)

// causes are the causes of a loss that the package reports; a loss matches
// exactly one of them.
var causes = []error{
	etcdlease.ErrSessionExpired,
	etcdlease.ErrSessionClosed,
	etcdlease.ErrKeyDeleted,
	etcdlease.ErrKeyTakenOver,
	etcdlease.ErrClusterLost,
	etcdlease.ErrRenewalUnconfirmed,
	etcdlease.ErrRenewalRefused,
}

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

// startEtcdWithOp starts a server as [startEtcd] does and returns it with
// op, an operator's client of it, which does to the holders' keys and
// sessions what etcd's other users can.
func startEtcdWithOp(t *testing.T) (srv *etcdtest.Server, op *clientv3.Client) {
	t.Helper()
	srv = startEtcd(t)
	return srv, newClient(t, srv)
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
	return newSessionOn(t, newClient(t, srv))
}

// newSessionOn returns a session of ttl seconds on cli; it ends when cli
// closes.
func newSessionOn(t *testing.T, cli *clientv3.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newLongSession returns a session of longTTL seconds on a client of its
// own; it ends when the test ends and its client closes.
func newLongSession(t *testing.T, srv *etcdtest.Server) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(newClient(t, srv), concurrency.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustLock returns the lease of the lock named key, held by session s.
func mustLock(t *testing.T, s *concurrency.Session, key string, opts ...etcdlease.Option) *etcdlease.Lease {
	t.Helper()
	l, err := etcdlease.Lock(t.Context(), s, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mustCampaign returns the lease of the leadership of election, won by
// session s with value.
func mustCampaign(t *testing.T, s *concurrency.Session, election, value string) *etcdlease.Lease {
	t.Helper()
	l, err := etcdlease.Campaign(t.Context(), s, election, value)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startAt makes the lease of the lock m holds, created at revision rev and
// granted at revision granted, as Lock does once etcd granted it.
func startAt(t *testing.T, s *concurrency.Session, m *concurrency.Mutex, granted, rev int64) *etcdlease.Lease {
	t.Helper()
	l, err := etcdlease.StartAt(t.Context(), s, lockName, m.Key(), rev, granted, m.Unlock)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// revoke revokes the etcd lease of session s through op, as an operator
// would.
func revoke(t *testing.T, op *clientv3.Client, s *concurrency.Session) {
	t.Helper()
	if _, err := op.Revoke(t.Context(), s.Lease()); err != nil {
		t.Fatal(err)
	}
}

// endSession revokes the etcd lease of session s through op and waits for
// the session to end.
func endSession(t *testing.T, op *clientv3.Client, s *concurrency.Session) {
	t.Helper()
	revoke(t, op, s)
	waitFor(t, s.Done(), hang, "the session to end after the revocation")
}

// deleteKey deletes key through op, as an operator would.
func deleteKey(t *testing.T, op *clientv3.Client, key string) {
	t.Helper()
	if _, err := op.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
}

// waitFor returns what c delivers, or the zero value once c is closed, or
// fails the test if c does neither within d. what names the wait.
func waitFor[T any](t *testing.T, c <-chan T, d time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-c:
		return v
	case <-timer.C:
		t.Fatalf("waited %v for %s", d, what)
		var zero T
		return zero
	}
}

// waitLost returns the loss of sig, or fails the test if sig is not lost
// within d.
func waitLost(t *testing.T, sig *signal.Signal, d time.Duration) error {
	t.Helper()
	waitFor(t, sig.Done(), d, sig.String()+" to be lost")
	return sig.Err()
}

// checkLoss checks that err is the loss of the lease on subject, matched
// through a wrap as a holder would, that its cause is want and no other
// cause the package reports, and that its message says words.
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
	checkCause(t, err, want, words)
}

// checkCause checks that err, matched through a wrap, has the cause want
// and no other cause the package reports, and that its message says words.
func checkCause(t *testing.T, err error, want error, words string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want one that matches %v", want)
	}
	wrapped := fmt.Errorf("copy: %w", err)
	if !errors.Is(wrapped, want) {
		t.Errorf("Err() = %v, want one that matches %v", err, want)
	}
	for _, other := range causes {
		if other != want && errors.Is(wrapped, other) {
			t.Errorf("Err() = %v, want it not to match %v", err, other)
		}
	}
	if !strings.Contains(err.Error(), words) {
		t.Errorf("Err() = %q, want it to say %q", err, words)
	}
}

// checkLost waits at most d for sig to be lost, checks the loss as
// [checkLoss] does, and returns it.
func checkLost(t *testing.T, sig *signal.Signal, d time.Duration, subject string, want error, words string) error {
	t.Helper()
	err := waitLost(t, sig, d)
	checkLoss(t, err, subject, want, words)
	return err
}

// checkRelease checks that release, a lease's Unlock or Resign, succeeds;
// what names the call.
func checkRelease(t *testing.T, what string, release func(context.Context) error) {
	t.Helper()
	if err := release(t.Context()); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// checkKeptLoss checks that sig still reports loss after its release.
func checkKeptLoss(t *testing.T, sig *signal.Signal, loss error) {
	t.Helper()
	if got := sig.Err(); got != loss {
		t.Errorf("after Unlock, Err() = %v, want the loss %v", got, loss)
	}
}

// checkUnlockAfterLoss checks that Unlock after the loss of l succeeds,
// cleaning up in etcd, and keeps the loss.
func checkUnlockAfterLoss(t *testing.T, l *etcdlease.Lease, loss error) {
	t.Helper()
	checkRelease(t, "Unlock after the loss", l.Unlock)
	checkKeptLoss(t, l.Signal(), loss)
}

// sessionKey is the key etcd's recipes make for session s under name.
func sessionKey(name string, s *concurrency.Session) string {
	return fmt.Sprintf("%s/%x", name, s.Lease())
}

// checkKey checks that l's key is the one etcd's recipes make for session
// s under name.
func checkKey(t *testing.T, l *etcdlease.Lease, name string, s *concurrency.Session) {
	t.Helper()
	if want := sessionKey(name, s); l.Key() != want {
		t.Errorf("Key() = %q, want %q", l.Key(), want)
	}
}

// lossProbe watches a signal through the ways a holder is told of a loss
// besides Err and Done: a context from the signal and an AfterLoss callback.
type lossProbe struct {
	sig   *signal.Signal
	ctx   context.Context
	fired chan struct{}
}

func probeLoss(t *testing.T, sig *signal.Signal) *lossProbe {
	t.Helper()
	ctx, cancel := sig.Context(t.Context())
	t.Cleanup(cancel)
	p := &lossProbe{sig: sig, ctx: ctx, fired: make(chan struct{})}
	sig.AfterLoss(func() { close(p.fired) })
	return p
}

// checkLive checks that the signal was never lost: Err is nil, Done is open,
// the context from the signal is not cancelled and the AfterLoss callback
// did not run.
func (p *lossProbe) checkLive(t *testing.T) {
	t.Helper()
	if err := p.sig.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	select {
	case <-p.sig.Done():
		t.Error("Done() is closed, want open")
	default:
	}
	if err := context.Cause(p.ctx); err != nil {
		t.Errorf("context.Cause(sig.Context(...)) = %v, want nil", err)
	}
	select {
	case <-p.fired:
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

// claimed is what a claim made in a goroutine returned.
type claimed struct {
	lease *etcdlease.Lease
	err   error
}

// claimBehind starts claim, a Lock or a Campaign of session s on name, in a
// goroutine, and returns once etcd has s's key: the claim then waits behind
// first, the holder of name. The claim's result goes to the channel it
// returns.
func claimBehind(t *testing.T, op *clientv3.Client, first *etcdlease.Lease, name string, s *concurrency.Session,
	claim func(context.Context) (*etcdlease.Lease, error)) <-chan claimed {
	t.Helper()
	prefix := watchKey(t, op, name+"/", first.Token()+1, clientv3.WithPrefix())
	c := make(chan claimed, 1)
	go func() {
		l, err := claim(t.Context())
		c <- claimed{l, err}
	}()
	waitEvent(t, prefix, clientv3.EventTypePut, sessionKey(name, s))
	return c
}

// checkNext waits for the claim that waited behind first and checks that it
// holds a live lease, fenced after first's; who names its holder.
func checkNext(t *testing.T, c <-chan claimed, first *etcdlease.Lease, who string) *etcdlease.Lease {
	t.Helper()
	r := waitFor(t, c, hang, who+"'s claim to return")
	if r.err != nil {
		t.Fatalf("%s's claim: %v", who, r.err)
	}
	next := r.lease
	if next.Token() <= first.Token() {
		t.Errorf("%s's Token() = %d, want more than the first's %d", who, next.Token(), first.Token())
	}
	if err := next.Signal().Err(); err != nil {
		t.Errorf("%s's Err() = %v, want nil", who, err)
	}
	return next
}

// checkFenced checks that a write inside etcd guarded by a lease's fencing
// token, clientv3.Compare(clientv3.CreateRevision(l.Key()), "=",
// l.Token()), is refused for first, which lost the lock, and done for
// next, which holds it.
func checkFenced(t *testing.T, op *clientv3.Client, first, next *etcdlease.Lease) {
	t.Helper()
	for _, c := range []struct {
		name string
		l    *etcdlease.Lease
		want bool
	}{{"first", first, false}, {"next", next, true}} {
		resp, err := op.Txn(t.Context()).
			If(clientv3.Compare(clientv3.CreateRevision(c.l.Key()), "=", c.l.Token())).
			Then(clientv3.OpPut("/fenced/"+c.name, "")).
			Commit()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Succeeded != c.want {
			t.Errorf("the %s holder's guarded write: Succeeded = %v, want %v", c.name, resp.Succeeded, c.want)
		}
	}
}
