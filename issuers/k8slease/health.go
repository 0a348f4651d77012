package k8slease

import (
	"context"
	"time"

	"github.com/zukhruf/lease/health"
)

// The lease's side of package health: its Health, read from its deadline,
// and the events its Config's Observer is told of, each sent after the fact
// and built only when there is an Observer.

const issuer = "k8slease"

// Health returns the lease's deadline ([Lease.Deadline]), the send time of
// the last write the apiserver confirmed (the grant or a renewal) and the
// margin that was left at that confirmation. It takes one mutex of the
// lease, never the network.
func (l *Lease) Health() health.Health {
	l.deadline.mu.Lock()
	defer l.deadline.mu.Unlock()
	return health.Health{Deadline: l.deadline.at, Renewed: l.deadline.sent, Margin: l.deadline.margin}
}

func (l *Lease) event() health.Event {
	return health.Event{Issuer: issuer, Subject: l.ctrl.Subject(), Token: l.token}
}

// granted reports the grant of a Lock begun at begun, and, from now on,
// each confirmed renewal.
func (l *Lease) granted(begun time.Time) {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	l.deadline.mu.Lock()
	l.deadline.renewed = l.renewed
	sent, at := l.deadline.sent, l.deadline.at
	l.deadline.mu.Unlock()
	e := l.event()
	e.Wait = time.Since(begun)
	health.NotifyGranted(o, e)
	l.watch.Arm(o, l.event(), sent, at)
}

func (l *Lease) renewed(sent, at, confirmed time.Time) {
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.ctrl.Signal().Err() != nil {
		return
	}
	e := l.event()
	e.Sent, e.Deadline = sent, at
	health.NotifyRenewed(l.cfg.Observer, e, confirmed)
	l.watch.Arm(l.cfg.Observer, l.event(), sent, at)
}

// renewalFailed reports a renewal sent at sent that failed with err, and is
// tried again.
func (l *Lease) renewalFailed(sent time.Time, err error) {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.ctrl.Signal().Err() != nil {
		return // a renewal cut by the loss tells nothing more
	}
	e := l.event()
	e.Sent, e.Deadline, e.Err = sent, l.deadline.current(), err
	health.NotifyFailed(o, e, time.Now()) // nothing past the deadline: the Lost tells it
}

func (l *Lease) loseAtDeadline(cause error) { l.loseVia(health.Deadline, cause) }

func (l *Lease) lost(via health.Via) {
	if o := l.cfg.Observer; o != nil {
		l.watch.Stop()
		l.obsMu.Lock()
		defer l.obsMu.Unlock()
		e := l.event()
		e.Err, e.Via = l.ctrl.Signal().Err(), via
		health.NotifyLost(o, e)
	}
}

// released reports the release of a lease that was not lost before it.
func (l *Lease) released() {
	if o := l.cfg.Observer; o != nil && l.ctrl.Signal().Err() == nil {
		l.watch.Stop()
		e := l.event()
		e.Err = l.err
		health.NotifyReleased(o, e)
	}
}

// ReleaseTimeout bounds the release that Unlock sends when its context has
// ended already: the release still goes out, under the context's values
// without its end, for at most this long. A Lease whose release did not go
// through is taken by the next candidate once its record expires.
const ReleaseTimeout = 5 * time.Second

// releaseContext returns the context a release is sent under: ctx while it
// is live, and a detached one bounded by ReleaseTimeout once it ended.
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
}

// loseAnswer loses the lease with a cause that a renewal's answer, or the
// read after its conflict, showed.
func (l *Lease) loseAnswer(cause error) { l.loseVia(health.Answer, cause) }
