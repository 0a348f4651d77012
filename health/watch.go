package health

import (
	"errors"
	"sync"
	"time"
)

// ErrUnconfirmed is the Err of an AtRisk event that a [Watch] reports: no
// renewal was confirmed, and less than 1/[RiskDivisor] of the span is left
// before the deadline.
var ErrUnconfirmed = errors.New("health: no renewal confirmed, and the deadline is near")

// Watch reports AtRisk when a lease's deadline comes within
// 1/[RiskDivisor] of its span (from the send time of the renewal that set
// it) while no later renewal was confirmed: the warning that comes before a
// loss by the deadline, however the renewals fail (unanswered, slowed past
// their window). An issuer keeps one per observed lease and arms it at the
// grant and at each confirmed renewal.
//
// The zero Watch is ready to use; it holds one timer, made at the first
// Arm. A Watch must not be copied after first use.
type Watch struct {
	mu      sync.Mutex
	o       Observer
	e       Event
	at      time.Time // the deadline the timer is armed for
	timer   *time.Timer
	stopped bool
}

// Arm sets the deadline watched to at, set by a renewal (or the grant) sent
// at sent; e names the lease. An Arm after Stop does nothing, and so does
// an Arm with a nil o.
func (w *Watch) Arm(o Observer, e Event, sent, at time.Time) {
	if o == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || !at.After(w.at) {
		return
	}
	w.o, w.e, w.at = o, e, at
	warn := time.Until(at.Add(-at.Sub(sent) / RiskDivisor))
	if w.timer == nil {
		w.timer = time.AfterFunc(warn, w.fire)
	} else {
		w.timer.Reset(warn)
	}
}

// Stop stops the watch for good: the lease was lost or released.
func (w *Watch) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *Watch) fire() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	defer w.mu.Unlock() // a Stop waits for the event: nothing follows the loss's
	left := time.Until(w.at)
	if left <= 0 {
		return // a timer run late, past the deadline: the Lost that follows tells it
	}
	e := w.e
	e.Kind, e.Deadline, e.Margin, e.Err = AtRisk, w.at, left, ErrUnconfirmed
	w.o.Observe(e)
}
