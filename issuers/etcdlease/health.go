package etcdlease

import (
	"context"
	"errors"
	"time"

	"github.com/zukhruf/lease/health"
)

// The lease's side of package health. One renewer keeps the deadline of
// every lease of a session, so a lease's Health is its renewer's, and each
// renewal the renewer confirms (or each stream that fails) is told to every
// lease on it that has an observer. So is its risk timer, armed at each
// confirmation for the moment a third of the span is left before the
// deadline: the AtRisk that comes before a loss by the deadline when the
// renewals go unanswered. A renewer on which no lease has one calls
// nothing and arms nothing; r.observers counts those that do.

const issuer = "etcdlease"

// WithObserver sets an observer that is told of the lease's grant,
// renewals, failed renewals, risk, loss and release ([health.Observer]). A
// renewal of the session's etcd lease is told to the observer of each lease
// on it. Nil, the default, reports nothing and costs nothing.
func WithObserver(o health.Observer) Option {
	return func(op *options) { op.observer = o }
}

// observed is what start needs to report a grant.
type observed struct {
	o     health.Observer
	begun time.Time
}

func observe(opts []Option, begun time.Time) observed {
	o, _ := parseOptions(opts) // parsed without error by acquire already
	return observed{o: o.observer, begun: begun}
}

// Health returns the deadline the session's renewals keep, the send time of
// the last renewal etcd confirmed and the margin that was left at that
// confirmation. It takes one mutex of the session's renewer, never the
// network.
func (l *Lease) Health() health.Health {
	r := l.renew
	r.mu.Lock()
	defer r.mu.Unlock()
	return health.Health{Deadline: r.deadline, Renewed: r.sent, Margin: r.left}
}

func (l *Lease) event() health.Event {
	return health.Event{Issuer: issuer, Subject: l.ctrl.Subject(), Token: l.rev}
}

// notifyGranted reports the grant and puts the lease among those its
// renewer tells of renewals; the lease is not yet attached, so nothing
// else reports on it yet. warnLate follows the attach.
func (l *Lease) notifyGranted(begun time.Time) {
	if l.obs == nil {
		return
	}
	e := l.event()
	e.Wait = time.Since(begun)
	health.NotifyGranted(l.obs, e)
	r, sh := l.renew, l.sh
	r.mu.Lock()
	r.observers++
	if r.renewed == nil {
		r.renewed = sh.renewed
		r.failedRenewal = sh.renewalFailed
		r.atRisk = sh.atRisk
	}
	r.armRisk(time.Now())
	r.mu.Unlock()
}

// warnLate tells l's observer AtRisk if l, now on its shared, was granted
// within the last third of the deadline in force: the risk timer fired, or
// never will, before the lease was on the shared. It runs after attach, so
// that a timer that fired between the grant and the attach does not leave
// the lease untold.
func (l *Lease) warnLate() {
	if l.obs == nil {
		return
	}
	r := l.renew
	r.mu.Lock()
	now := time.Now()
	late := r.loss == nil && !r.deadline.IsZero() && !now.Before(riskAt(r.sent, r.deadline))
	deadline := r.deadline
	r.mu.Unlock()
	if late {
		l.warn(deadline, now)
	}
}

// warn reports AtRisk ([health.ErrUnconfirmed]) to l's observer: at now,
// the deadline in force is within a third of its span and no later renewal
// was confirmed.
func (l *Lease) warn(deadline, now time.Time) {
	e := l.event()
	e.Kind, e.Deadline, e.Margin, e.Err = health.AtRisk, deadline, deadline.Sub(now), health.ErrUnconfirmed
	l.notify(func() { l.obs.Observe(e) })
}

// unobserve takes the lease off its renewer's count, once, at its loss or
// release.
func (l *Lease) unobserve() {
	if l.obs == nil {
		return
	}
	l.renew.mu.Lock()
	l.renew.observers--
	l.renew.mu.Unlock()
}

// observedLeases returns the leases on sh that have an observer.
func (sh *shared) observedLeases() []*Lease {
	sh.r.mu.Lock()
	n := sh.r.observers
	sh.r.mu.Unlock()
	if n == 0 {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := make([]*Lease, 0, n)
	for l := range sh.leases {
		if l.obs != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

func (sh *shared) renewed(sent, deadline, confirmed time.Time) {
	for _, l := range sh.observedLeases() {
		e := l.event()
		e.Sent, e.Deadline = sent, deadline
		l.notify(func() { health.NotifyRenewed(l.obs, e, confirmed) })
	}
}

func (sh *shared) renewalFailed(err error, deadline time.Time) {
	now := time.Now()
	for _, l := range sh.observedLeases() {
		e := l.event()
		e.Deadline, e.Err = deadline, err
		l.notify(func() { health.NotifyFailed(l.obs, e, now) })
	}
}

// atRisk tells each observed lease on sh that the session's deadline is
// near and no renewal since was confirmed: the renewer's risk timer fired.
func (sh *shared) atRisk(deadline time.Time) {
	now := time.Now()
	for _, l := range sh.observedLeases() {
		l.warn(deadline, now)
	}
}

func (l *Lease) lost() {
	if l.obs == nil {
		return
	}
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	e := l.event()
	e.Err = l.ctrl.Signal().Err()
	e.Via = via(e.Err)
	health.NotifyLost(l.obs, e)
}

// notify calls report unless the lease was lost or released: nothing
// follows the loss's event or the release's.
func (l *Lease) notify(report func()) {
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.ctrl.Signal().Err() == nil && !l.off.Load() {
		report()
	}
}

// via says how the cause of a loss was learned: the local deadline, an
// answer of etcd to a renewal, or else a push (a watch event, the session's
// or the connection's end).
func via(cause error) health.Via {
	switch {
	case errors.Is(cause, ErrRenewalUnconfirmed):
		return health.Deadline
	case errors.Is(cause, ErrRenewalRefused), errors.Is(cause, ErrSessionExpired):
		return health.Answer
	}
	return health.Push
}

// released tells the release under l.obsMu, as lost tells the loss: an
// event that notify is telling meanwhile comes before it, and none after.
func (l *Lease) released() {
	if l.obs == nil {
		return
	}
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	e := l.event()
	e.Err = l.err
	health.NotifyReleased(l.obs, e)
}

// ReleaseTimeout bounds the release that Unlock sends when its context has
// ended already: the release still goes out, under the context's values
// without its end, for at most this long. A key whose release did not go
// through is deleted with the session's etcd lease.
const ReleaseTimeout = 5 * time.Second

// releaseContext returns the context a release is sent under: ctx while it
// is live, and a detached one bounded by ReleaseTimeout once it ended.
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
}
