package natslease

import (
	"fmt"
	"sync"
	"time"
)

// The deadline rule. The server stamps each write with its wall clock when
// the stream leader stores it, and expires the key when its clock reaches
// that stamp plus the write's TTL; the store comes after this process sent
// the write. So the key cannot expire before
//
//	s + TTL,  s = the send time of the last write (grant or renewal) that was confirmed
//
// and the lease is lost at that time less the margin, unless a later write
// was confirmed by then. A write is confirmed when the server's
// acknowledgement arrives: in a cluster, the stream leader acknowledges a
// write once a majority of the stream's replicas stored it, so the replica
// that leads next holds it with its stamp. The rule assumes that this
// process's monotonic clock and the servers' wall clocks advance at rates
// that differ by less than margin/TTL, and that the wall clocks of the
// servers of a cluster differ by less than the margin (see
// [Config.Margin]).
type deadline struct {
	cfg  Config
	lose func(error)

	mu      sync.Mutex
	sent    time.Time // the send time of the last confirmed write
	at      time.Time // when the lease is lost unless a later write is confirmed
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
	d.sent = sent
	d.at = sent.Add(cfg.TTL - cfg.Margin)
	d.margin = time.Until(d.at)
	d.timer = time.AfterFunc(d.margin, d.expire)
}

// confirm records that the write sent at sent was confirmed, and moves the
// deadline if that gives a later one; then it tells renewed, if set, after
// the fact.
func (d *deadline) confirm(sent time.Time) {
	d.mu.Lock()
	at := sent.Add(d.cfg.TTL - d.cfg.Margin)
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
	cause := fmt.Errorf("%w: the last write the server confirmed was sent at %s: deadline %s (plus the TTL %v, less the margin %v)",
		ErrRenewalUnconfirmed, clock(d.sent), clock(d.at), d.cfg.TTL, d.cfg.Margin)
	d.mu.Unlock()
	d.lose(cause)
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
