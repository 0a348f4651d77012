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

// granted reports the grant of a Lock begun at begun.
func (l *Lease) granted(begun time.Time) {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	e := l.event()
	e.Wait = time.Since(begun)
	health.NotifyGranted(o, e)
	if l.sh != nil {
		l.sh.set.mu.Lock()
		l.obs, l.observed = o, true
		l.sh.set.mu.Unlock()
		l.sh.observers.Add(1)
	} else {
		l.mu.Lock()
		l.obs, l.observed = o, true
		l.mu.Unlock()
	}
}

// heartbeatConfirmed records the margin of a heartbeat of a session of its
// own, sent at sent and answered now, and reports it.
func (l *Lease) heartbeatConfirmed(sent time.Time) {
	now := time.Now()
	at := sent.Add(l.cfg.Deadline)
	l.mu.Lock()
	l.left = at.Sub(now)
	o := l.obs
	l.mu.Unlock()
	if o != nil && l.ctrl.Signal().Err() == nil {
		e := l.event()
		e.Sent, e.Deadline = sent, at
		health.NotifyRenewed(o, e, now)
	}
}

// renewed reports the confirmation of sh at sent to the leases on it that
// have an observer.
func (sh *shared) renewed(sent time.Time) {
	now := time.Now()
	at := sent.Add(sh.set.cfg.Deadline)
	sh.set.mu.Lock()
	ls := make([]*Lease, 0, sh.observers.Load())
	for l := range sh.leases {
		if l.obs != nil {
			ls = append(ls, l)
		}
	}
	sh.set.mu.Unlock()
	for _, l := range ls {
		if l.ctrl.Signal().Err() != nil {
			continue // lost since: nothing follows the loss's event
		}
		e := l.event()
		e.Sent, e.Deadline = sent, at
		health.NotifyRenewed(l.obs, e, now)
	}
}

// unobserve takes the lease off its shared's count, once.
func (l *Lease) unobserve() (health.Observer, bool) {
	if l.sh != nil {
		l.sh.set.mu.Lock()
		o, was := l.obs, l.observed
		l.observed = false
		l.sh.set.mu.Unlock()
		if was {
			l.sh.observers.Add(-1)
		}
		return o, was
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o, was := l.obs, l.observed
	l.observed = false
	return o, was
}

func (l *Lease) lost(cause error) {
	if l.cfg.Observer == nil {
		return
	}
	if o, was := l.unobserve(); was {
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
	if l.cfg.Observer == nil || l.ctrl.Signal().Err() != nil {
		return
	}
	if o, was := l.unobserve(); was {
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
