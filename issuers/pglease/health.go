package pglease

import (
	"context"
	"errors"
	"time"

	"github.com/zukhruf/lease/health"
)

// The lease's side of package health. A lease's renewals are the
// heartbeats of its session: the deadline is the send time of the last one
// the server answered plus Config.Deadline. On a shared session every
// answered statement confirms the session, and each confirmation is told to
// every lease on it that has an observer; a session on which none has one
// calls nothing (shared.observers counts them).
//
// No heartbeat fails without ending its session, so no RenewalFailed is
// told: a heartbeat that cannot be written means a broken connection, and
// an error in reply to one leaves the session in doubt; either ends the
// session, whose locks the server frees with it, and so loses its leases
// (Lost). A heartbeat that is slow or unanswered is no failure until the
// deadline: the warning before a loss by the deadline is a watch of the
// session's confirmations (health.Watch), armed at the grant and at each
// confirmation for the point a third of the span before the deadline, one
// per session whatever its number of leases: a lease's own on a session of
// its own, the shared session's on a shared one, whose AtRisk goes to the
// observed leases on it at that moment (fanOut).

const issuer = "pglease"

// Health returns the lease's deadline (the send time of the last heartbeat
// its session answered, plus Config.Deadline), that send time, and the
// margin that was left at that answer. It takes one mutex, never the
// network.
func (l *Lease) Health() health.Health {
	if sh := l.sh; sh != nil {
		sh.wmu.Lock()
		defer sh.wmu.Unlock()
		return health.Health{Deadline: sh.confirmed.Add(l.cfg.Deadline), Renewed: sh.confirmed, Margin: sh.left}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return health.Health{Deadline: l.confirmed.Add(l.cfg.Deadline), Renewed: l.confirmed, Margin: l.left}
}

func (l *Lease) event() health.Event {
	return health.Event{Issuer: issuer, Subject: l.ctrl.Subject(), Token: l.token}
}

// granted reports the grant of a Lock begun at begun, and arms the watch of
// its session. A lease lost before it was reported (its session ended as
// Lock returned) is told its loss at once after its grant.
func (l *Lease) granted(begun time.Time) {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	e := l.event()
	e.Wait = time.Since(begun)
	l.obsMu.Lock()
	health.NotifyGranted(o, e)
	if err := l.ctrl.Signal().Err(); err != nil {
		e.Wait, e.Err, e.Via = 0, err, via(err)
		health.NotifyLost(o, e)
		l.obsMu.Unlock()
		return
	}
	l.observed = true
	if l.sh != nil {
		l.sh.observers.Add(1)
	}
	l.obsMu.Unlock()
	if sh := l.sh; sh != nil {
		sh.armRisk(sh.lastConfirmed())
		return
	}
	l.mu.Lock()
	sent := l.confirmed
	l.mu.Unlock()
	l.watch.Arm((*riskOf)(l), l.event(), sent, sent.Add(l.cfg.Deadline))
}

// tell calls f with the lease's observer while the lease is observed and
// not lost, in the order of the lease's events: nothing follows the Lost or
// Released event.
func (l *Lease) tell(f func(o health.Observer)) {
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.observed && l.ctrl.Signal().Err() == nil {
		f(l.cfg.Observer)
	}
}

// heartbeatConfirmed records the margin of a heartbeat of a session of its
// own, sent at sent and answered now, reports it, and arms the watch for
// the deadline it sets.
func (l *Lease) heartbeatConfirmed(sent time.Time) {
	now := time.Now()
	at := sent.Add(l.cfg.Deadline)
	l.mu.Lock()
	l.left = at.Sub(now)
	l.mu.Unlock()
	if l.cfg.Observer == nil {
		return
	}
	l.tell(func(o health.Observer) {
		e := l.event()
		e.Sent, e.Deadline = sent, at
		health.NotifyRenewed(o, e, now)
	})
	l.watch.Arm((*riskOf)(l), l.event(), sent, at)
}

// riskOf is the observer that a lease's watch tells: the lease's own,
// through tell, so that no AtRisk follows its loss.
type riskOf Lease

func (r *riskOf) Observe(e health.Event) {
	(*Lease)(r).tell(func(o health.Observer) { o.Observe(e) })
}

// observedLeases returns the leases on sh that have an observer.
func (sh *shared) observedLeases() []*Lease {
	sh.set.mu.Lock()
	defer sh.set.mu.Unlock()
	ls := make([]*Lease, 0, sh.observers.Load())
	for l := range sh.leases {
		if l.cfg.Observer != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

// renewed reports the confirmation of sh at sent to the leases on it that
// have an observer.
func (sh *shared) renewed(sent time.Time) {
	now := time.Now()
	at := sent.Add(sh.set.cfg.Deadline)
	for _, l := range sh.observedLeases() {
		l.tell(func(o health.Observer) {
			e := l.event()
			e.Sent, e.Deadline = sent, at
			health.NotifyRenewed(o, e, now)
		})
	}
}

// armRisk arms the session's watch for the deadline that its confirmation
// at sent sets. The watch's AtRisk is fanned out by fanOut.
func (sh *shared) armRisk(sent time.Time) {
	sh.riskArms.Add(1)
	sh.risk.Arm((*fanOut)(sh), health.Event{Issuer: issuer}, sent, sent.Add(sh.set.cfg.Deadline))
}

// fanOut is the observer of a shared session's watch: it tells the AtRisk
// of the session to each lease on it that is observed at that moment, as
// its own event.
type fanOut shared

func (f *fanOut) Observe(e health.Event) {
	for _, l := range (*shared)(f).observedLeases() {
		l.tell(func(o health.Observer) {
			le := e
			le.Subject, le.Token = l.ctrl.Subject(), l.token
			o.Observe(le)
		})
	}
}

// unobserve ends the lease's events, once, and reports whether they were
// on. The caller holds obsMu.
func (l *Lease) unobserve() bool {
	was := l.observed
	l.observed = false
	if was && l.sh != nil {
		l.sh.observers.Add(-1)
	}
	return was
}

// lost reports the loss, after it: the lease's last event.
func (l *Lease) lost(cause error) {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	if l.watch != nil {
		l.watch.Stop()
	}
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.unobserve() {
		e := l.event()
		e.Err, e.Via = l.ctrl.Signal().Err(), via(cause)
		health.NotifyLost(o, e)
	}
}

// via says how the cause of a loss was learned: the deadline of the
// heartbeats, a heartbeat's answer from the wrong session, or else a push
// (the pending read: a termination, a shutdown, a connection lost).
func via(cause error) health.Via {
	switch {
	case errors.Is(cause, ErrUnresponsive):
		return health.Deadline
	case errors.Is(cause, ErrPooled):
		return health.Answer
	}
	return health.Push
}

// released reports the release of a lease that was not lost before it.
func (l *Lease) released() {
	o := l.cfg.Observer
	if o == nil || l.ctrl.Signal().Err() != nil {
		return
	}
	if l.watch != nil {
		l.watch.Stop()
	}
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.unobserve() {
		e := l.event()
		e.Err = l.err
		health.NotifyReleased(o, e)
	}
}

// ReleaseTimeout bounds the release that Unlock sends when its context has
// ended already: the release still goes out, under the context's values
// without its end, for at most this long (and, as any release, at most
// Config.Deadline for the heartbeats in flight).
const ReleaseTimeout = 5 * time.Second

// releaseContext returns the context a release is sent under: ctx while it
// is live, and a detached one bounded by ReleaseTimeout once it ended.
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
}
