package k8slease

import (
	"fmt"
	"sync"
	"time"
)

// The deadline rule. A candidate takes the Lease over once the record it
// observed has not changed for the lease duration, counted from the moment
// it first saw that version, which comes after the write that made it was
// sent. client-go's candidates compare the record as JSON in which renewTime
// is a metav1.Time, written to the whole second: a renewal sent in the same
// second as the one before it changes nothing such a candidate sees, and the
// version it counts from may be the first write of that second, even one
// whose answer never reached this holder. Every write whose renewTime falls
// in the second S was sent at S or later. So no candidate, client-go's or
// k8slease's, can take the Lease over before
//
//	S + lease duration,  S = the send time of the last renewal the apiserver confirmed, rounded down to its second
//
// and the lease is lost at that time less the margin, unless a renewal of a
// later second was confirmed by then. S is read from the wall clock the
// renewTime is written with, and the deadline is kept on the monotonic
// clock from the same reading; the rule assumes that the wall clock is not
// set back by more than the margin while the lease lives, and that the
// clocks of this process and of every candidate advance at rates that differ
// by less than margin/lease duration. It is client-go's rule,
// RenewDeadline < LeaseDuration, anchored to the start of the renewal's
// second, not to the arrival of its answer as client-go's observedTime is.
//
// Renewals are sent just after the start of a whole second (alignDelay
// after it), so that the rounding costs almost nothing.
const alignDelay = 5 * time.Millisecond

// sinceSecond returns how far t is past the start of its wall-clock second.
func sinceSecond(t time.Time) time.Duration {
	return time.Duration(t.UnixNano() % int64(time.Second))
}

// startOfSecond returns the start of t's wall-clock second, keeping t's
// monotonic reading, so that the result can be compared with, and waited
// for on, the monotonic clock.
func startOfSecond(t time.Time) time.Time { return t.Add(-sinceSecond(t)) }

// nextRenewal returns when to send the renewal after the one sent at sent:
// period later, moved back to just after the start of its second if that is
// a later second than sent's, so that the renewal counts from all of it.
func nextRenewal(sent time.Time, period time.Duration) time.Time {
	next := sent.Add(period)
	if s := startOfSecond(next); s.After(startOfSecond(sent)) {
		return s.Add(alignDelay)
	}
	return next
}

// deadline keeps a lease's local deadline and loses the lease when it comes.
type deadline struct {
	cfg  Config
	lose func(error)

	mu      sync.Mutex
	sent    time.Time // the send time of the last confirmed renewal
	at      time.Time // when the lease is lost unless a later renewal is confirmed
	timer   *time.Timer
	stopped bool // the lease was lost or released: the deadline moves no more

	margin  time.Duration                       // at - the time the renewal at sent was confirmed
	renewed func(sent, at, confirmed time.Time) // nil, or told of each confirmation that moved at
}

// start arms the deadline for a first write sent at sent.
func (d *deadline) start(cfg Config, sent time.Time, lose func(error)) {
	d.cfg, d.lose = cfg, lose
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent = sent
	d.at = d.from(sent)
	d.margin = time.Until(d.at)
	d.timer = time.AfterFunc(d.margin, d.expire)
}

// from returns the deadline a renewal sent at sent gives.
func (d *deadline) from(sent time.Time) time.Time {
	return startOfSecond(sent).Add(d.cfg.LeaseDuration - d.cfg.Margin)
}

// confirm records that the apiserver applied the renewal sent at sent, and
// moves the deadline if that renewal's second is later.
func (d *deadline) confirm(sent time.Time) {
	d.mu.Lock()
	at := d.from(sent)
	if d.stopped || !at.After(d.at) {
		d.mu.Unlock()
		return
	}
	now := time.Now()
	d.sent, d.at, d.margin = sent, at, at.Sub(now)
	d.timer.Reset(d.margin)
	renewed := d.renewed
	d.mu.Unlock()
	if renewed != nil {
		renewed(sent, at, now)
	}
}

// current returns the deadline as it stands.
func (d *deadline) current() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// stop stops the timer; the deadline moves no more.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
}

// expire loses the lease if the deadline has come: the timer's func. It
// waits on nothing but the mutex that confirm holds for a few instructions.
func (d *deadline) expire() {
	d.mu.Lock()
	if d.stopped || time.Now().Before(d.at) {
		d.mu.Unlock() // a confirmation moved the deadline as the timer fired
		return
	}
	d.stopped = true
	cause := fmt.Errorf("%w: the last renewal the apiserver confirmed was sent at %s: deadline %s (its second, plus the lease duration %v, less the margin %v)",
		ErrRenewalUnconfirmed, clock(d.sent), clock(d.at), d.cfg.LeaseDuration, d.cfg.Margin)
	d.mu.Unlock()
	d.lose(cause)
}
