package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/signal"
)

// Lease is a claim held in etcd, a lock or a leadership, and the lease that
// tells its holder when the claim is gone.
//
// A Lease is made by [Lock], [Campaign] or a [Locker]; there is no useful
// zero value. Its methods are safe for concurrent use. It follows its claim
// with the watch of its key and the state of the client's connection, and
// keeps a local deadline (see [WithMargin]) from the renewals of the
// session's etcd lease, all of it shared with the other leases of its
// session and margin: one renewal stream, one watch stream, no goroutine of
// its own. It stops following its claim at the loss or at the release,
// whichever comes first. Closing the session's client loses the
// lease with [ErrClusterLost] if nothing did before.
type Lease struct {
	ctrl    *controller.Controller
	key     string
	rev     int64
	granted int64
	release func(context.Context) error
	free    func() // nil, or called once at the loss or after the release: a Locker's turn

	sh       *shared  // renews, follows and keeps the deadline for the leases of the session
	renew    *renewer // sh's
	detached sync.Once
	off      atomic.Bool // the lease no longer follows its claim

	wid, next int64 // the key's watch ID, and the revision its watch goes on from (0: none); sh.w.mu guards them

	once sync.Once
	err  error // the release's outcome, set once

	obs   health.Observer // nil: none
	obsMu sync.Mutex      // orders the renewals' events before the loss's
}

// Lock waits until the session holds the etcd lock named key, by the
// recipe of etcd's [concurrency.Mutex] and on the same keys, so that it
// and etcd's mutexes on key exclude each other, and returns the lease of
// that lock. The signal's subject is key.
//
// Before it asks for the lock, Lock waits for etcd to confirm a renewal of
// the session's etcd lease, sent on the renewal stream the leases of the
// session share (at once if one was confirmed already), which gives the
// local deadline its start; the renewals go on while it waits. The lease
// is lost at the local deadline unless a later renewal was confirmed (see
// [WithMargin] for the rule and the options).
//
// ctx bounds the wait only; the lease lasts until it is lost or released.
// The wait also ends when the session does, or when its renewals fail (the
// deadline passes, etcd has no lease of the session or refuses to renew
// it): the error then wraps that cause. A mistake that cannot heal (a
// closed client or session, a permission etcd refuses, a margin out of
// range) returns at once; while the cluster is unreachable, Lock retries
// with backoff until ctx or the session ends, and its error wraps both
// that end and the last renewal stream's error. A wait that ends without
// the lock deletes the session's waiting key before Lock returns, trying
// until the session ends, at most the session's TTL: while the cluster does
// not answer, Lock returns by then, and the key goes with the session's
// etcd lease. Lock panics if ctx or s is nil, or s was not made by
// concurrency.NewSession.
//
// A session should hold one Lease per key at a time: etcd's mutex, and
// Lock, give a session that locks a key twice the same claim. A [Locker]
// orders the leases of one session and key in the process.
func Lock(ctx context.Context, s *concurrency.Session, key string, opts ...Option) (*Lease, error) {
	begun := time.Now()
	checkArgs(ctx, s, "Lock")
	sh, err := acquire(ctx, s, opts)
	if err != nil {
		return nil, fmt.Errorf("etcdlease: lock %s: %w", quote(key), err)
	}
	c := newClaim(s, sh.r, key)
	if err := sh.r.bound(ctx, s, c.lock); err != nil {
		sh.release()
		return nil, fmt.Errorf("etcdlease: lock %s: %w", quote(key), err)
	}
	return start(sh, key, c.key, c.rev, c.granted, c.unlock, nil, observe(opts, begun)), nil
}

// Campaign waits until the session leads the etcd election named election,
// with value as its proposal, by the recipe of etcd's
// [concurrency.Election] and on the same keys, and returns the lease of
// that leadership. The signal's subject is election.
//
// Campaign renews the session's etcd lease, keeps the local deadline, ends
// its wait and deletes its waiting key as [Lock] does.
//
// ctx bounds the campaign only; the lease lasts until it is lost or
// resigned. Like etcd's election, Campaign does not notice that a waiting
// candidate's own key was deleted: the lease follows the key from the
// candidate's put, and is then lost as soon as it is made.
func Campaign(ctx context.Context, s *concurrency.Session, election, value string, opts ...Option) (*Lease, error) {
	begun := time.Now()
	checkArgs(ctx, s, "Campaign")
	sh, err := acquire(ctx, s, opts)
	if err != nil {
		return nil, fmt.Errorf("etcdlease: campaign %s: %w", quote(election), err)
	}
	c := newClaim(s, sh.r, election)
	if err := sh.r.bound(ctx, s, func(ctx context.Context) error { return c.campaign(ctx, value) }); err != nil {
		sh.release()
		return nil, fmt.Errorf("etcdlease: campaign %s: %w", quote(election), err)
	}
	return start(sh, election, c.key, c.rev, c.granted, c.resign, nil, observe(opts, begun)), nil
}

// checkArgs panics, naming the call, if ctx or s is nil or s was not made
// by concurrency.NewSession: a *concurrency.Session has no other nil than
// the untyped one.
func checkArgs(ctx context.Context, s *concurrency.Session, call string) {
	switch {
	case ctx == nil:
		panic("etcdlease: " + call + " called with a nil context")
	case s == nil:
		panic("etcdlease: " + call + " called with a nil session")
	case s.Client() == nil:
		panic("etcdlease: " + call + " called with a session not made by concurrency.NewSession")
	}
}

// bound runs wait, etcd's wait for the claim, with a context that also
// ends when session s ends or r loses the claim-to-be (its deadline passed,
// or etcd has no lease of the session or refused to renew it): the wait
// then cannot succeed, and its error wraps the reason.
func (r *renewer) bound(ctx context.Context, s *concurrency.Session, wait func(context.Context) error) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var why error
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-s.Done():
			why = fmt.Errorf("%w: session %x ended while Lock or Campaign waited", ErrSessionClosed, s.Lease())
		case <-r.failed:
			r.mu.Lock()
			why = r.loss
			r.mu.Unlock()
		case <-wctx.Done():
			return
		}
		cancel(why)
	}()
	err := wait(wctx)
	cancel(nil)
	<-done
	switch {
	case err == nil:
		return nil
	case why != nil:
		return fmt.Errorf("%w: %w", why, err)
	case ctx.Err() == nil:
		return err
	}
	// Cut by ctx: the error names its cause and the last renewal
	// stream's end, which tells why the wait did not end sooner.
	if cause := context.Cause(ctx); !errors.Is(err, cause) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	if !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if last := r.lastErr(); last != nil {
		err = fmt.Errorf("%w; the last renewal stream ended with: %w", err, last)
	}
	return err
}

// maxQuoted is how many bytes of a caller's string an error quotes.
const maxQuoted = 64

// quote returns s quoted for an error, cut to its first maxQuoted bytes
// (at a character's start) and marked with "…" when longer: an error
// names a key, it does not carry it.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	n := maxQuoted
	for n > maxQuoted-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "…"
}

// start makes the lease of a claim granted at revision granted, on shared
// sh, whose hold it takes, and starts following it. free, if not nil, is
// called once: when the lease is lost, or after its release.
func start(sh *shared, subject, key string, rev, granted int64, release func(context.Context) error, free func(), o observed) *Lease {
	l := &Lease{ctrl: controller.New(subject), key: key, rev: rev, granted: granted, release: release, free: free, sh: sh, renew: sh.r, obs: o.o}
	l.notifyGranted(o.begun)
	sh.attach(l)
	l.warnLate()
	return l
}

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (l *Lease) Signal() *signal.Signal { return l.ctrl.Signal() }

// Key returns the holder's key in etcd: the lock's or election's name, a
// slash, and the session's etcd lease in hex.
func (l *Lease) Key() string { return l.key }

// Token returns the create revision of the holder's key: the fencing token
// of this lease. Each later holder of the same lock or election has a larger
// one, so a resource that remembers the largest token it accepted and
// refuses smaller ones refuses a holder that lost its lease, even one whose
// signal has not told it yet. Inside etcd, a transaction guarded by
// clientv3.Compare(clientv3.CreateRevision(l.Key()), "=", l.Token()) does
// the same. Successive calls return the same value.
func (l *Lease) Token() int64 { return l.rev }

// Revision returns the create revision of the holder's key, as [Lease.Token]
// does.
//
// Deprecated: use [Lease.Token], the name every issuer uses.
func (l *Lease) Revision() int64 { return l.rev }

// Unlock releases the lease: it ends the signal first, so that nothing etcd
// reports afterwards, not even the deletion of the key that the release
// itself causes, loses it; it stops following the claim; then it deletes
// the holder's key in etcd, bounded by ctx. A lease lost before Unlock stays
// lost, and its key is deleted all the same. A lease of a [Locker] deletes
// the key only if it is still the one the lease put.
//
// Unlock returns the error etcd gave to the release, if any. Successive
// calls, and calls of Resign, return the first call's result. Unlock and
// Resign are the same release, named after etcd's mutex and election.
func (l *Lease) Unlock(ctx context.Context) error {
	l.once.Do(func() {
		ended := l.ctrl.End() // false: lost, and the loss called free
		l.detach()
		ctx, cancel := releaseContext(ctx)
		defer cancel()
		if err := l.release(ctx); err != nil {
			l.err = fmt.Errorf("etcdlease: release %s: %w", quote(l.key), err)
		}
		if ended {
			l.released()
		}
		if ended && l.free != nil {
			l.free()
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
	l.settle(l.ctrl.Lose(cause))
}

// settle does what follows a Lose that won (won) or lost to a release or
// an earlier loss: it frees the claim, stops following it and tells the
// observer. Nothing here runs before Lose, so that a loss of many leases
// loses them all first (loseBatch).
func (l *Lease) settle(won bool) {
	if won && l.free != nil {
		l.free()
	}
	l.detach()
	if won {
		l.lost()
	}
}

// loseBatch loses every lease of leases with cause, all of them, and only
// then frees, detaches and tells each: no observer, and no bookkeeping, is
// called while a lease of the batch is still live.
func loseBatch(leases []*Lease, cause error) {
	if len(leases) == 1 { // no slice of results to make
		leases[0].lose(cause)
		return
	}
	won := make([]bool, len(leases))
	for i, l := range leases {
		won[i] = l.ctrl.Lose(cause)
	}
	for i, l := range leases {
		l.settle(won[i])
	}
}

// detach stops following the claim and gives back the lease's hold on its
// shared, once.
func (l *Lease) detach() {
	l.detached.Do(func() {
		l.unobserve()
		l.sh.detach(l)
		l.off.Store(true)
	})
}
