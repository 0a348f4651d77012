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
// the session that has an observer, and so is the session's warning (see
// shared.atRisk); a session on which none has one calls nothing and arms
// no warning (shared.observers counts them). The events of a session's
// leases are told under its notify mutex, never under a lock a statement
// or a Lock needs, so that each lease's arrive in order and none after its
// Lost or Released.

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
// among its session's observers. It tells and counts under the session's
// notify mutex, which fail takes after it loses its leases: a lease lost
// before it was counted (its session ended as Lock returned) is told its
// loss here, at once after its grant; one counted before, by fail.
func (l *Lease) granted(begun time.Time) {
	if l.obs == nil {
		return
	}
	e := l.event()
	e.Wait = time.Since(begun)
	m := l.m
	m.notify.Lock()
	health.NotifyGranted(l.obs, e)
	if err := l.ctrl.Signal().Err(); err != nil {
		e.Wait, e.Err, e.Via = 0, err, via(err)
		health.NotifyLost(l.obs, e)
		m.notify.Unlock()
		return
	}
	m.observers.Add(1)
	l.observed.Store(true)
	// Granted after the warning for the confirmation in force was told,
	// the lease is told it now; a warning not yet told tells it.
	m.mu.Lock()
	c, dead := m.confirmed, m.dead
	m.mu.Unlock()
	if at := c.Add(m.cfg.deadline()); !dead && m.warned.Equal(c) && l.ctrl.Signal().Err() == nil {
		if left := time.Until(at); left > 0 {
			e := l.event()
			e.Kind, e.Deadline, e.Margin, e.Err = health.AtRisk, at, left, health.ErrUnconfirmed
			l.obs.Observe(e)
		}
	}
	m.notify.Unlock()
	m.observe()
}

// observe arms the session's warning for its last confirmation if it was
// not armed, now that a lease on it has an observer.
func (m *shared) observe() {
	m.mu.Lock()
	m.armRisk()
	m.mu.Unlock()
}

// observedLeases returns the leases of the session that have an observer.
func (m *shared) observedLeases() []*Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	ls := make([]*Lease, 0, m.observers.Load())
	for l := range m.leases {
		if l.observed.Load() {
			ls = append(ls, l)
		}
	}
	return ls
}

// renewed reports the confirmation of m at sent, known at confirmed, to the
// leases on it that have an observer; a confirmation older than one already
// reported (two statements answered at once) is not reported.
func (m *shared) renewed(sent, confirmed time.Time) {
	ls := m.observedLeases()
	at := sent.Add(m.cfg.deadline())
	m.notify.Lock()
	defer m.notify.Unlock()
	if !sent.After(m.reported) {
		return
	}
	m.reported = sent
	for _, l := range ls {
		if !l.observed.Load() || l.ctrl.Signal().Err() != nil {
			continue // released or lost since: nothing follows its event
		}
		e := l.event()
		e.Sent, e.Deadline = sent, at
		health.NotifyRenewed(l.obs, e, confirmed)
	}
}

// renewalFailed reports a heartbeat sent at sent that the server answered
// with err, and that confirmed nothing, to the leases on the session that
// have an observer: RenewalFailed, then AtRisk, with the deadline in force.
func (m *shared) renewalFailed(sent time.Time, err error) {
	ls := m.observedLeases()
	m.mu.Lock()
	at := m.confirmed.Add(m.cfg.deadline())
	m.mu.Unlock()
	now := time.Now()
	m.notify.Lock()
	defer m.notify.Unlock()
	for _, l := range ls {
		if !l.observed.Load() || l.ctrl.Signal().Err() != nil {
			continue
		}
		e := l.event()
		e.Sent, e.Deadline, e.Err = sent, at, err
		health.NotifyFailed(l.obs, e, now)
	}
}

// The session's warning: one timer for the session, whatever its number of
// leases, as its deadline is one. It is armed at each confirmation while a
// lease on the session has an observer, for the point 1/RiskDivisor of the
// span (ServerTimeout − Margin) before the deadline; if no later statement
// was confirmed by then, every observed lease on the session is told
// AtRisk with [health.ErrUnconfirmed]: a third of the span before the
// deadline loses them, however the heartbeats fail (unanswered, slowed past
// their window).

// riskAt returns when the warning for the confirmation at sent is due; mu
// is held.
func (m *shared) riskAt(sent time.Time) time.Time {
	d := m.cfg.deadline()
	return sent.Add(d - d/health.RiskDivisor)
}

// armRisk arms the session's warning for its last confirmation, when a
// lease on it has an observer and it is not armed for that one yet; mu is
// held.
func (m *shared) armRisk() {
	if m.dead || m.observers.Load() == 0 || (m.risk != nil && m.riskFor.Equal(m.confirmed)) {
		return
	}
	m.riskFor = m.confirmed
	wait := time.Until(m.riskAt(m.confirmed))
	if m.risk == nil {
		m.risk = time.AfterFunc(wait, m.atRisk)
	} else {
		m.risk.Reset(wait)
	}
}

// atRisk runs when the session's warning is due: it tells the observed
// leases on the session AtRisk unless a confirmation moved the deadline
// meanwhile or the session ended.
func (m *shared) atRisk() {
	m.mu.Lock()
	if m.dead || time.Until(m.riskAt(m.confirmed)) > 0 {
		m.mu.Unlock()
		return
	}
	c := m.confirmed
	at := c.Add(m.cfg.deadline())
	m.mu.Unlock()
	ls := m.observedLeases()
	m.notify.Lock()
	defer m.notify.Unlock()
	m.warned = c // a lease granted later is told by granted
	for _, l := range ls {
		if !l.observed.Load() || l.ctrl.Signal().Err() != nil {
			continue
		}
		left := time.Until(at)
		if left <= 0 {
			return // the deadline passed: the Lost that follows tells it, as in health.NotifyFailed
		}
		e := l.event()
		e.Kind, e.Deadline, e.Margin, e.Err = health.AtRisk, at, left, health.ErrUnconfirmed
		l.obs.Observe(e)
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

// lost reports the loss of a lease with cause; the session's notify mutex
// is held.
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
	if l.obs == nil {
		return
	}
	l.m.notify.Lock()
	defer l.m.notify.Unlock()
	if l.ctrl.Signal().Err() == nil && l.unobserve() {
		e := l.event()
		e.Err = l.err
		health.NotifyReleased(l.obs, e)
	}
}
