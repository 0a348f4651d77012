package redislease

import (
	"fmt"
	"sync"
	"time"
)

// The deadline rule. Redis counts a key's expiry from the moment it runs
// the write that set it, which comes after this process sent the write. So
// the key cannot expire on the primary before
//
//	s + TTL,  s = the send time of the last write (grant or renewal) that was confirmed
//
// and the lease is lost at that time less the margin, unless a later write
// was confirmed by then. A write is confirmed when the primary applied it
// and, where the primary has replicas, when as many replicas as the grant
// needed acknowledged it (WAIT, on the same connection as the write): Redis
// 7 sends the expiry to its replicas as an absolute time (PXAT, PEXPIREAT),
// so the replica promoted in the primary's place expires the key no sooner
// than the primary would have. The rule assumes that this process's clock
// and the servers' advance at rates that differ by less than margin/TTL, and
// that the wall clocks of the primary and its replicas differ by less than
// the margin.
type deadline struct {
	cfg  Config
	lose func(error)

	mu      sync.Mutex
	sent    time.Time // the send time of the last confirmed write
	applied time.Time // the send time of the last write Redis applied, confirmed or not
	at      time.Time // when the lease is lost unless a later write is confirmed
	cause   error     // the cause at at: nil for ErrRenewalUnconfirmed
	timer   *time.Timer
	stopped bool // the lease was lost or released: the deadline moves no more

	margin  time.Duration                       // at - the time the write at sent was confirmed
	renewed func(sent, at, confirmed time.Time) // nil, or told of each confirmation that moved at
}

// start arms the deadline for a grant sent at sent.
func (d *deadline) start(cfg Config, sent time.Time, lose func(error)) {
	d.cfg, d.lose = cfg, lose
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent, d.applied = sent, sent
	d.at = sent.Add(cfg.TTL - cfg.Margin)
	d.margin = time.Until(d.at)
	d.timer = time.AfterFunc(d.margin, d.expire)
}

// apply records that Redis applied the write sent at sent: the key expires
// no sooner than sent plus the TTL, whether the replicas have it or not.
func (d *deadline) apply(sent time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sent.After(d.applied) {
		d.applied = sent
	}
}

// lastApplied returns the send time of the last write Redis applied.
func (d *deadline) lastApplied() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.applied
}

// confirm records that the write sent at sent was confirmed, and moves the
// deadline if that gives a later one. A deadline shortened by the server's
// expiry (see shorten) moves no more.
func (d *deadline) confirm(sent time.Time) {
	d.mu.Lock()
	at := sent.Add(d.cfg.TTL - d.cfg.Margin)
	if d.stopped || d.cause != nil || !at.After(d.at) {
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

// shorten brings the deadline forward to expires less the margin, if that
// is sooner: the server said the key expires at expires at the earliest.
// The loss then reports cause.
func (d *deadline) shorten(expires time.Time, cause error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at := expires.Add(-d.cfg.Margin)
	if d.stopped || !at.Before(d.at) {
		return
	}
	d.at, d.cause = at, cause
	d.timer.Reset(time.Until(at))
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
	cause := d.cause
	if cause == nil {
		cause = fmt.Errorf("%w: the last write Redis confirmed was sent at %s: deadline %s (plus the TTL %v, less the margin %v)",
			ErrRenewalUnconfirmed, clock(d.sent), clock(d.at), d.cfg.TTL, d.cfg.Margin)
	}
	d.mu.Unlock()
	d.lose(cause)
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
