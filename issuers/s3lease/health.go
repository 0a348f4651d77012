package s3lease

import (
	"context"
	"time"

	"github.com/zukhruf/lease/health"
)

// The lease's side of package health: its Health, read from its deadline,
// and the events its Config's Observer is told of, each sent after the fact
// and built only when there is an Observer. Each lease keeps a deadline of
// its own (no session's deadline is shared), so an observed lease keeps a
// health.Watch of its own beside it.

const issuer = "s3lease"

// Health returns the lease's deadline ([Lease.Deadline]), the send time of
// the last write the store confirmed (the grant or a renewal) and the
// margin that was left at that confirmation. It takes one mutex of the
// lease, never the network.
func (l *Lease) Health() health.Health {
	l.deadline.mu.Lock()
	defer l.deadline.mu.Unlock()
	return health.Health{Deadline: l.deadline.at, Renewed: l.deadline.sent, Margin: l.deadline.margin}
}

func (l *Lease) event() health.Event {
	return health.Event{Issuer: issuer, Subject: l.subject, Token: l.token}
}

// granted reports the grant, sent at sent, of a Lock begun at begun, and
// arms the watch of its deadline. Lock calls it before the deadline's timer
// runs, so that no Lost event comes before it.
func (l *Lease) granted(begun, sent time.Time) {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	e := l.event()
	e.Wait = time.Since(begun)
	health.NotifyGranted(o, e)
	l.watch.Arm(o, l.event(), sent, sent.Add(l.cfg.life()))
}

// renewed reports a renewal sent at sent and confirmed at confirmed, which
// moved the deadline to at.
func (l *Lease) renewed(sent, at, confirmed time.Time) {
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.reported {
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
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if l.reported || l.done() {
		return // a renewal cut by the loss or the release tells nothing more
	}
	e := l.event()
	e.Sent, e.Deadline, e.Err = sent, l.deadline.current(), err
	health.NotifyFailed(l.cfg.Observer, e, time.Now())
}

// lost reports the loss of the lease, learned via.
func (l *Lease) lost(via health.Via) {
	o := l.cfg.Observer
	if o == nil {
		return
	}
	l.watch.Stop() // waits for a warning in flight: nothing follows the loss
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	l.reported = true
	e := l.event()
	e.Err, e.Via = l.ctrl.Signal().Err(), via
	health.NotifyLost(o, e)
}

// released reports the release of a lease that was not lost before it.
func (l *Lease) released() {
	o := l.cfg.Observer
	if o == nil || l.ctrl.Signal().Err() != nil {
		return
	}
	l.watch.Stop()
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	l.reported = true
	e := l.event()
	e.Err = l.err
	health.NotifyReleased(o, e)
}

// ReleaseTimeout bounds the release that Unlock sends when its context has
// ended already: the release still goes out, under the context's values
// without its end, for at most this long. An object whose release did not
// go through is taken over once its written expiry passes.
const ReleaseTimeout = 5 * time.Second

// releaseContext returns the context a release is sent under: ctx while it
// is live, and a detached one bounded by ReleaseTimeout once it ended.
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
}
