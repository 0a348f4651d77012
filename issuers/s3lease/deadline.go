package s3lease

import (
	"fmt"
	"sync"
	"time"
)

// The deadline rule. A holder writes into the lock object the time of its
// own clock at the send of the write plus the TTL; S3 keeps no expiry of
// its own, and a waiter takes the object over once its clock passes that
// time. A waiter whose clock runs ahead of the holder's by δ takes over at
//
//	s + TTL − δ,  s = the send time of the last write that was confirmed
//
// in real time, and no sooner. The lease is lost at s + TTL − ClockSkew −
// Margin, on this process's monotonic clock, unless a later write was
// confirmed by then: before any waiter whose clock is ahead by at most
// ClockSkew, by Margin at least. The rule assumes that the wall clocks of
// all the holders of a subject differ by less than ClockSkew, and that
// their rates differ by less than Margin over one TTL. A waiter whose clock
// runs further ahead may take over while the holder is live: only the
// fencing token protects the resource then.
type deadline struct {
	life time.Duration // Config.life()
	lose func(error)

	mu      sync.Mutex
	sent    time.Time     // the send time of the last confirmed write
	at      time.Time     // when the lease is lost unless a later write is confirmed
	margin  time.Duration // at less the time the write at sent was confirmed
	timer   *time.Timer
	stopped bool
}

// start arms the deadline for a grant sent at sent.
func (d *deadline) start(life time.Duration, sent time.Time, lose func(error)) {
	d.life, d.lose = life, lose
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent, d.at = sent, sent.Add(life)
	d.margin = time.Until(d.at)
	d.timer = time.AfterFunc(d.margin, d.expire)
}

// confirm records that the write sent at sent was confirmed, and moves the
// deadline if that gives a later one. It returns the new deadline, the time
// of the confirmation and whether it moved the deadline.
func (d *deadline) confirm(sent time.Time) (at, confirmed time.Time, moved bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at = sent.Add(d.life)
	if d.stopped || !at.After(d.at) {
		return at, confirmed, false
	}
	confirmed = time.Now()
	d.sent, d.at, d.margin = sent, at, at.Sub(confirmed)
	d.timer.Reset(d.margin)
	return at, confirmed, true
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

// expire loses the lease if the deadline has come: the timer's func.
func (d *deadline) expire() {
	d.mu.Lock()
	if d.stopped || time.Now().Before(d.at) {
		d.mu.Unlock() // a confirmation moved the deadline as the timer fired
		return
	}
	d.stopped = true
	cause := fmt.Errorf("%w: the last write the store confirmed was sent at %s: deadline %s (plus the TTL less the clock skew and the margin, %v)",
		ErrRenewalUnconfirmed, clock(d.sent), clock(d.at), d.life)
	d.mu.Unlock()
	d.lose(cause)
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
