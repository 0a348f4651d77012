package natslease

import (
	"context"
	"time"

	"github.com/zukhruf/lease/health"
)

// The lease's side of package health: its Health, read from its deadline,
// and the events its Config's Observer is told of, each sent after the fact
// and built only when there is an Observer. The deadline is the lease's own
// (the session keeps none), so an observed lease has a Watch of its own,
// one runtime timer beside its deadline's.

const issuer = "natslease"

// Health returns the lease's deadline, the send time of the last write the
// server confirmed (the grant or a renewal) and the margin that was left at
// that confirmation. It takes one mutex of the lease, never the network.
func (l *Lease) Health() health.Health {
	l.deadline.mu.Lock()
	defer l.deadline.mu.Unlock()
	return health.Health{Deadline: l.deadline.at, Renewed: l.deadline.sent, Margin: l.deadline.margin}
}

func (l *Lease) event() health.Event {
	return health.Event{Issuer: issuer, Subject: l.key, Token: int64(l.granted)}
}

// grantedAt reports the grant of a Lock begun at begun, whose Create was
// sent at sent, and, from now on, each confirmed renewal. It runs before
// the deadline is armed, so that a grant lost at once is told as Granted,
// then Lost.
func (l *Lease) grantedAt(begun time.Time) {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	l.deadline.mu.Lock()
	l.deadline.renewed = l.renewed
	l.deadline.mu.Unlock()
	e := l.event()
	e.Wait = time.Since(begun)
	health.NotifyGranted(o, e)
}

// armWatch arms the lease's Watch for the deadline the grant set.
func (l *Lease) armWatch() {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	l.deadline.mu.Lock()
	sent, at := l.deadline.sent, l.deadline.at
	l.deadline.mu.Unlock()
	l.watch.Arm(o, l.event(), sent, at)
}

// renewed reports the confirmation, at confirmed, of the renewal sent at
// sent, which moved the deadline to at.
func (l *Lease) renewed(sent, at, confirmed time.Time) {
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.ctrl.Signal().Err() != nil || l.released.Load() {
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
	if l.ctrl.Signal().Err() != nil || l.released.Load() {
		return // a renewal cut by the loss or the release tells nothing more
	}
	e := l.event()
	e.Sent, e.Deadline, e.Err = sent, l.deadline.current(), err
	health.NotifyFailed(o, e, time.Now())
}

// lost reports the loss of the signal, learned via, after it.
func (l *Lease) lost(via health.Via) {
	if o := l.cfg.Observer; o != nil {
		l.watch.Stop() // waits for a warning in flight: it comes before the loss
		l.obsMu.Lock()
		defer l.obsMu.Unlock()
		e := l.event()
		e.Err, e.Via = l.ctrl.Signal().Err(), via
		health.NotifyLost(o, e)
	}
}

// releasedEvent reports the release of a lease that was not lost before
// it.
func (l *Lease) releasedEvent() {
	if o := l.cfg.Observer; o != nil && l.ctrl.Signal().Err() == nil {
		l.watch.Stop()
		l.obsMu.Lock()
		defer l.obsMu.Unlock()
		e := l.event()
		e.Err = l.err
		health.NotifyReleased(o, e)
	}
}

// ReleaseTimeout bounds the release that Unlock sends when its context has
// ended already: the release still goes out, under the context's values
// without its end, for at most this long. A key whose release did not go
// through expires at its TTL.
const ReleaseTimeout = 5 * time.Second

// releaseContext returns the context a release is sent under: ctx while it
// is live, and a detached one bounded by ReleaseTimeout once it ended.
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
}
