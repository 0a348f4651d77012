package mysqllease

import (
	"errors"
	"time"

	"github.com/zukhruf/lease/health"
)

// The lease's side of package health. A lease's renewals are the
// confirmations of its shared session (a heartbeat, or any statement
// answered as sent): the deadline is the send time of the last one plus
// ServerTimeout less Margin. Each confirmation is told to every lease on
// the session that has an observer; a session on which none has one calls
// nothing (shared.observers counts them).

const issuer = "mysqllease"

// Health returns the lease's deadline (the send time of the last statement
// its session had answered, plus ServerTimeout less Margin), that send
// time, and the margin that was left at that answer. It takes one mutex,
// never the network.
func (l *Lease) Health() health.Health {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return health.Health{Deadline: m.confirmed.Add(m.cfg.deadline()), Renewed: m.confirmed, Margin: m.left}
}

func (l *Lease) event() health.Event {
	return health.Event{Issuer: issuer, Subject: l.ctrl.Subject(), Token: l.token}
}

// granted reports the grant of a Lock begun at begun, and counts the lease
// among its session's observers.
func (l *Lease) granted(begun time.Time) {
	if l.obs == nil {
		return
	}
	e := l.event()
	e.Wait = time.Since(begun)
	health.NotifyGranted(l.obs, e)
	l.observed.Store(true)
	l.m.observers.Add(1)
}

// renewed reports the confirmation of m at sent to the leases on it that
// have an observer.
func (m *shared) renewed(sent time.Time) {
	now := time.Now()
	at := sent.Add(m.cfg.deadline())
	m.mu.Lock()
	ls := make([]*Lease, 0, m.observers.Load())
	for l := range m.leases {
		if l.observed.Load() {
			ls = append(ls, l)
		}
	}
	m.mu.Unlock()
	for _, l := range ls {
		if l.ctrl.Signal().Err() != nil {
			continue // lost since: nothing follows the loss's event
		}
		e := l.event()
		e.Sent, e.Deadline = sent, at
		health.NotifyRenewed(l.obs, e, now)
	}
}

// unobserve takes the lease off its session's count, once, and reports
// whether it was on it.
func (l *Lease) unobserve() bool {
	if l.obs == nil || !l.observed.CompareAndSwap(true, false) {
		return false
	}
	l.m.observers.Add(-1)
	return true
}

func (l *Lease) lost(cause error) {
	if l.unobserve() {
		e := l.event()
		e.Err, e.Via = l.ctrl.Signal().Err(), via(cause)
		health.NotifyLost(l.obs, e)
	}
}

// via says how the cause of a loss was learned: the session's deadline, or
// else a push (the watcher's pending statement, a heartbeat that failed).
func via(cause error) health.Via {
	if errors.Is(cause, ErrUnresponsive) {
		return health.Deadline
	}
	return health.Push
}

// released reports the release of a lease that was not lost before it.
func (l *Lease) released() {
	if l.ctrl.Signal().Err() == nil && l.unobserve() {
		e := l.event()
		e.Err = l.err
		health.NotifyReleased(l.obs, e)
	}
}
