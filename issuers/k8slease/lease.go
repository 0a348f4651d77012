package k8slease

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/signal"
)

// Lease is a claim on a Kubernetes Lease object, and the lease that tells
// its holder when the claim is gone.
//
// A Lease is made by [Lock] or [Config.Lock]; there is no useful zero value.
// Its methods are safe for concurrent use. It renews the record, follows the
// object and keeps a local deadline, all of it until the loss or the
// release, whichever comes first. The leases of one clientset and namespace
// share one watch and one renewal scheduler (see the README, "many leases,
// one clientset"): a lease costs no goroutine and no watch of its own.
type Lease struct {
	ctrl     *controller.Controller
	leases   coordinationclient.LeaseInterface
	name     string
	identity string
	cfg      Config
	token    int64
	acquired time.Time // the acquireTime this holder wrote
	trans    int32     // the leaseTransitions this holder wrote

	sub       *sub               // its place in its session: the watch's events, the renewals
	stop      context.CancelFunc // stops renewing and following
	stopRenew context.CancelFunc // stops renewing only
	rctx      context.Context    // the renewals' context
	deadline  deadline
	share     *share // the lease's part of the clientset's rate limit

	// The renewals, each sent by renewOnce under renewMu. cur is the record
	// as this holder last wrote or read it: Unlock's once it holds renewMu
	// after the renewals ended, whose release writes it free without
	// reading it first.
	renewMu    sync.Mutex
	cur        *coordinationv1.Lease
	unanswered []time.Time // renewals sent since the last one confirmed
	retries    backoff

	// Guarded by the session's mutex.
	next       time.Time // when the next renewal is due
	index      int       // in the session's heap of renewals, -1 if not there
	renewEnded bool      // no renewal is scheduled any more
	endRenew   sync.Once

	once sync.Once
	err  error // the release's outcome, set once

	watch health.Watch // warns an observer as the deadline nears unrenewed
	obsMu sync.Mutex   // orders the renewals' events before the loss's
}

// Lock waits until the candidate identity holds the Lease object
// namespace/name, and returns its lease. The signal's subject is
// "namespace/name".
//
// A candidate takes the Lease when it does not exist (it creates it), when
// its record names no holder, or when the record it observed has not changed
// for the record's leaseDurationSeconds, counted on this process's clock
// from the moment it first saw that version: client-go's rule. Every write
// is an Update that carries the resourceVersion it read, so two candidates
// that try at once cannot both succeed. While it waits, Lock follows the
// Lease on its clientset's watch of the namespace's Leases, shared with the
// other leases and Locks of the clientset and namespace, so a release is
// taken at once.
//
// identity must be unique among the candidates: a record that names this
// identity is taken as another holder's, and waited out, unless it is this
// Lock's own write whose answer did not come. ctx bounds the wait only; a
// Lock it cuts leaves no goroutine behind, and tries to give up the Lease
// if the write that took it was already sent. The lease lasts until it is
// lost or [Lease.Unlock] is called; a write whose answer came after its
// deadline gives a lease already lost.
//
// A mistake that no retry mends fails Lock at once, with an error that
// names it and wraps the apiserver's answer: an invalid name, namespace,
// identity or Config, a credential or CA the apiserver does not take, a
// Role without get, create, update or watch on leases, an address where
// nothing answered, a clientset whose rate limit cannot sustain one more
// lease (see the README, "what you may get wrong"). A failure that may heal,
// such as a namespace not made yet, is retried after a pause that doubles
// up to 2 s, and a Lock cut by ctx then returns an error that wraps both
// ctx.Err() and the last failure. Lock panics if ctx is nil.
func (c Config) Lock(ctx context.Context, cs kubernetes.Interface, namespace, name, identity string) (*Lease, error) {
	if ctx == nil {
		panic("k8slease: Lock called with a nil context")
	}
	return c.lock(ctx, cs, namespace, name, identity, claim{call: "lock", subject: namespace + "/" + name})
}

// claim is how a lock asks for the Lease: the call its errors name, the
// subject its signal names, and, for a TryLock, what its Locker observed of
// the record (nil for a Lock, which waits).
type claim struct {
	call    string
	subject string
	try     *observation
}

// lock is [Config.Lock] and [Locker]'s Lock and TryLock: the one grant path.
func (c Config) lock(ctx context.Context, cs kubernetes.Interface, namespace, name, identity string, cl claim) (*Lease, error) {
	begun := time.Now()
	sub := subject(namespace, name)
	if err := checkArgs(cs, namespace, name, identity); err != nil {
		return nil, fmt.Errorf("k8slease: %s %s: %w", cl.call, sub, err)
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("k8slease: %s %s: %w", cl.call, sub, err)
	}
	share, err := c.reserve(cs)
	if err != nil {
		return nil, fmt.Errorf("k8slease: %s %s: %w", cl.call, sub, err)
	}
	leases := cs.CoordinationV1().Leases(namespace)
	b := join(cs, namespace, name)
	got, sent, err := c.acquire(ctx, leases, b, share, name, identity, cl.try)
	if err != nil {
		b.leaveAndWait()
		share.release()
		return nil, fmt.Errorf("k8slease: %s %s: %w", cl.call, sub, err)
	}
	tok, err := token(got)
	if err != nil {
		b.leaveAndWait()
		share.release()
		c.giveUp(leases, name, identity, sent)
		return nil, fmt.Errorf("k8slease: %s %s: %w", cl.call, sub, err)
	}
	l := &Lease{
		ctrl:     controller.New(cl.subject),
		leases:   leases,
		name:     name,
		identity: identity,
		cfg:      c,
		token:    tok,
		acquired: sent,
		trans:    transitionsOf(got),
		sub:      b,
		share:    share,
		cur:      slim(got),
		index:    -1,
	}
	fctx, stop := context.WithCancel(context.Background())
	rctx, stopRenew := context.WithCancel(fctx)
	l.stop, l.stopRenew, l.rctx = stop, stopRenew, rctx
	// The deadline's timer loses the lease whatever the session is doing;
	// it is armed before the lease is followed and renewed.
	l.deadline.start(c, sent, l.loseAtDeadline)
	share.hold(c)
	l.granted(begun)
	context.AfterFunc(rctx, l.endRenewals)
	context.AfterFunc(fctx, func() { b.leave() })
	b.hold(l, tok)
	b.s.renewAt(l, nextRenewal(sent, c.RenewPeriod))
	return l, nil
}

// endRenewals takes the lease off its session's schedule and gives its
// share of the rate limit back. Successive calls do nothing more.
func (l *Lease) endRenewals() {
	l.endRenew.Do(func() {
		l.sub.s.unschedule(l)
		l.share.release()
	})
}

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (l *Lease) Signal() *signal.Signal { return l.ctrl.Signal() }

// Token returns the fencing token of this lease: the resourceVersion of the
// write that gave the Lease to this holder, as an integer. Every later
// holder of namespace/name has a larger one, even if the Lease object was
// deleted and made again in between, when leaseTransitions starts again at
// 0: a resource that remembers the largest token it accepted and refuses
// smaller ones refuses a holder that lost its lease, even one whose signal
// has not told it yet.
//
// Since Kubernetes 1.35, resourceVersions of objects of one resource type
// compare as monotonically increasing integers (KEP-5504, comparable
// resource versions; k8s.io/apimachinery/pkg/util/resourceversion). The
// promise is for the type, not the object, so it holds across a deletion;
// nothing is promised across types, so compare a token only with tokens of
// Leases of the same cluster.
func (l *Lease) Token() int64 { return l.token }

// Unlock releases the lease: it ends the signal first, so that nothing seen
// afterwards loses it, not even the change of the record the release itself
// makes; it stops renewing and following the Lease; then it reads the record
// and, if it still names this holder as acquired by this lease, writes it
// free (no holder, a lease duration of 1 s, as client-go's ReleaseOnCancel
// does), so that a waiting candidate takes it at once. A record that names
// another holder is left alone. ctx bounds the release; a ctx that has
// ended already still sends it, detached, for at most [ReleaseTimeout]; a
// lease lost before Unlock stays lost, and its record is released all the same if it is still
// this holder's.
//
// Unlock returns the error the apiserver gave to the release, if any: the
// Lease then stays recorded as this holder's until it expires. Successive
// calls return the first call's result.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("k8slease: Unlock called with a nil context")
	}
	l.once.Do(func() {
		defer l.released()
		ctx, cancel := releaseContext(ctx)
		defer cancel()
		l.ctrl.End()
		l.stop()
		l.endRenewals()
		l.renewMu.Lock() // waits for the renewal in flight, cut by stop
		last := l.cur
		l.renewMu.Unlock()
		l.sub.leaveAndWait()
		l.deadline.stop()
		if _, err := release(ctx, l.leases, l.name, l.identity, l.acquired, last); err != nil {
			l.err = fmt.Errorf("k8slease: unlock %s: %w", l.ctrl.Subject(), err)
		}
	})
	return l.err
}

// Deadline returns the moment the lease is lost unless a renewal sent
// before it is confirmed: the start of the second of the last confirmed
// renewal's send time, plus the lease duration, less the margin. The
// signal is lost at that moment by a timer; a holder that was not running
// then (a process paused, a machine suspended) runs again before the timer
// does, and may compare time.Now() with Deadline before a write to refuse
// it without waiting for the signal. After the loss or the release it
// returns the last deadline kept.
func (l *Lease) Deadline() time.Time { return l.deadline.current() }

// StopRenewing stops the renewals and leaves the record as it stands: the
// lease runs out at its deadline, where the signal is lost
// ([ErrRenewalUnconfirmed]), and another candidate takes the Lease over once
// the record expires, as it takes a crashed holder's. The Lease is still
// watched until then, so a takeover or a deletion is still seen at once.
//
// StopRenewing is for a holder whose work under the lease did not stop when
// asked: releasing the Lease would let the next holder in while that work
// still runs, and renewing it would keep the work's lease alive for as long
// as the process lives. It returns at once; it does nothing to a lease lost
// or released, and successive calls do nothing more. [Lease.Unlock] may
// still be called afterwards: it releases the record if it is still this
// holder's.
func (l *Lease) StopRenewing() { l.stopRenew() }

// lose loses the lease with cause, unless it was released, and stops
// renewing and following it.
func (l *Lease) lose(cause error) { l.loseVia(health.Push, cause) }

// loseVia loses the lease with cause, learned via, and reports the loss to
// the observer after it.
func (l *Lease) loseVia(via health.Via, cause error) {
	won := l.ctrl.Lose(cause)
	l.deadline.stop()
	l.stop()
	if won {
		l.lost(via)
	}
}

// record writes this holder's record, renewed at renewed, into a copy of cur.
func (l *Lease) record(cur *coordinationv1.Lease, renewed time.Time) *coordinationv1.Lease {
	upd := cur.DeepCopy()
	setRecord(upd, l.identity, l.cfg.durationSeconds(), l.acquired, renewed, l.trans)
	return upd
}
