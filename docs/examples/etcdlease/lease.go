package etcdlease

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

// Lease is a claim held in etcd, a lock or a leadership, and the lease that
// tells its holder when the claim is gone.
//
// A Lease is made by [Lock] or [Campaign]; there is no useful zero value. Its
// methods are safe for concurrent use. It follows its claim with the watch of
// its key and the state of the client's connection, and renews the session's
// etcd lease on a stream of its own to keep a local deadline (see
// [WithMargin]); all of it stops at the loss or at the release, whichever
// comes first. Closing the session's client loses the lease with
// [ErrClusterLost] if nothing did before.
type Lease struct {
	ctrl    *controller.Controller
	key     string
	rev     int64
	release func(context.Context) error

	stop     context.CancelFunc // stops following the claim
	watchers sync.WaitGroup     // the goroutines that follow it
	renew    *renewer           // renews the session's etcd lease and keeps the local deadline

	once sync.Once
	err  error // the release's outcome, set once
}

// Lock waits until the session holds the etcd lock named key, with a
// [concurrency.Mutex], and returns the lease of that lock. The signal's
// subject is key.
//
// Before it asks for the lock, Lock waits for etcd to confirm a renewal of
// the session's etcd lease sent on a stream of the lease's own, which gives
// the local deadline its start; it keeps renewing while it waits. The lease
// is lost at the local deadline unless a later renewal was confirmed (see
// [WithMargin] for the rule and the options).
//
// ctx bounds the wait only; the lease lasts until it is lost or released.
// A session should hold one Lease per key at a time: etcd's mutex gives a
// session that locks a key twice the same claim.
func Lock(ctx context.Context, s *concurrency.Session, key string, opts ...Option) (*Lease, error) {
	r, err := startRenewing(ctx, s, opts)
	if err != nil {
		return nil, fmt.Errorf("etcdlease: lock %q: %w", key, err)
	}
	m := concurrency.NewMutex(s, key)
	if err := m.Lock(ctx); err != nil {
		r.close()
		return nil, fmt.Errorf("etcdlease: lock %q: %w", key, err)
	}
	owner := m.IsOwner() // the comparison etcd's own recipe makes: CreateRevision(key) = rev
	return start(r, s, key, m.Key(), owner.GetCompare().GetCreateRevision(), m.Header().Revision, m.Unlock), nil
}

// Campaign waits until the session leads the etcd election named election,
// with value as its proposal, with a [concurrency.Election], and returns the
// lease of that leadership. The signal's subject is election.
//
// Campaign renews the session's etcd lease and keeps the local deadline as
// [Lock] does.
//
// ctx bounds the campaign only; the lease lasts until it is lost or
// resigned. etcd's election does not notice that a waiting candidate's own
// key was deleted: the lease follows the key from the candidate's put, and
// is then lost as soon as it is made.
func Campaign(ctx context.Context, s *concurrency.Session, election, value string, opts ...Option) (*Lease, error) {
	r, err := startRenewing(ctx, s, opts)
	if err != nil {
		return nil, fmt.Errorf("etcdlease: campaign %q: %w", election, err)
	}
	e := concurrency.NewElection(s, election)
	if err := e.Campaign(ctx, value); err != nil {
		r.close()
		return nil, fmt.Errorf("etcdlease: campaign %q: %w", election, err)
	}
	return start(r, s, election, e.Key(), e.Rev(), e.Header().Revision, e.Resign), nil
}

// start makes the lease of a claim granted at revision granted, kept by
// renewer r, and starts following it.
func start(r *renewer, s *concurrency.Session, subject, key string, rev, granted int64, release func(context.Context) error) *Lease {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lease{ctrl: controller.New(subject), key: key, rev: rev, release: release, stop: cancel, renew: r}
	// The renewer loses the lease from its own timer, whatever the
	// goroutines below are doing; it stops when the lease stops following
	// its claim.
	r.attach(l.lose)
	l.watchers.Add(1)
	go func() {
		defer l.watchers.Done()
		<-ctx.Done()
		r.close()
	}()
	client := s.Client()
	// The watch starts after the revision the claim was granted at, so no
	// event between the grant and this call is missed. WithRequireLeader
	// makes a member that loses its leader end the watch instead of going
	// quiet.
	events := client.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithRev(granted+1))
	l.watchers.Add(1)
	go l.follow(ctx, s, events)
	if conn := client.ActiveConnection(); conn != nil {
		l.watchers.Add(1)
		go l.followConn(ctx, conn)
	}
	return l
}

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (l *Lease) Signal() *signal.Signal { return l.ctrl.Signal() }

// Key returns the holder's key in etcd: the lock's or election's name, a
// slash, and the session's etcd lease in hex.
func (l *Lease) Key() string { return l.key }

// Revision returns the create revision of the holder's key: the fencing
// token of this lease. Each later holder of the same lock or election has a
// larger one, so a resource that remembers the largest revision it accepted
// and refuses smaller ones refuses a holder that lost its lease, even one
// whose signal has not told it yet. Inside etcd, a transaction guarded by
// clientv3.Compare(clientv3.CreateRevision(l.Key()), "=", l.Revision()) does
// the same.
func (l *Lease) Revision() int64 { return l.rev }

// Unlock releases the lease: it ends the signal first, so that nothing etcd
// reports afterwards, not even the deletion of the key that the release
// itself causes, loses it; it stops following the claim; then it deletes
// the holder's key in etcd, bounded by ctx. A lease lost before Unlock stays
// lost, and its key is deleted all the same.
//
// Unlock returns the error etcd gave to the release, if any. Successive
// calls, and calls of Resign, return the first call's result. Unlock and
// Resign are the same release, named after etcd's mutex and election.
func (l *Lease) Unlock(ctx context.Context) error {
	l.once.Do(func() {
		l.ctrl.End()
		l.stop()
		l.watchers.Wait()
		if err := l.release(ctx); err != nil {
			l.err = fmt.Errorf("etcdlease: release %q: %w", l.key, err)
		}
	})
	return l.err
}

// Resign releases the lease exactly as [Lease.Unlock] does; it is the name
// etcd's election gives the release.
func (l *Lease) Resign(ctx context.Context) error { return l.Unlock(ctx) }

// lose loses the lease with cause, unless it was released, and stops
// following the claim.
func (l *Lease) lose(cause error) {
	l.ctrl.Lose(cause)
	l.stop()
}
