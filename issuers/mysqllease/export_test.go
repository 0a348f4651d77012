package mysqllease

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"time"

	"github.com/zukhruf/lease/health"
)

// Claim records a live lease of this process on the lock name of db's
// server, as Lock does once the server grants it, and returns the func that
// ends the record.
func Claim(ctx context.Context, db *sql.DB, name string) (func(), error) {
	var server string
	if err := db.QueryRowContext(ctx, "SELECT "+serverSQL).Scan(&server); err != nil {
		return nil, err
	}
	return claim(ctx, lockID{server: server, name: name})
}

// AsAnotherProcess makes the leases of db those of another process, for
// the registry that orders a process's leases of one lock: a waiting Lock
// of db is not held back by a lease of another pool, nor theirs by db's.
func AsAnotherProcess(db *sql.DB) (restore func()) {
	apart.Store(db, true)
	return func() { apart.Delete(db) }
}

// Polling returns how many Locks wait by polling, and how many sessions of
// waits are open, for the pools of this process.
func Polling() (polled, waiting int) {
	sets.Lock()
	defer sets.Unlock()
	for _, st := range sets.m {
		st.mu.Lock()
		polled += len(st.polled)
		waiting += st.waiting
		st.mu.Unlock()
	}
	return polled, waiting
}

// SetLeasesPerSession sets how many leases a shared session holds before a
// Lock opens another, and returns the func that restores it.
func SetLeasesPerSession(n int) (restore func()) {
	old := leasesPerSession
	leasesPerSession = n
	return func() { leasesPerSession = old }
}

// Graces returns how many grants waited Config.Grace for a holder whose
// session had ended.
func Graces() int64 { return graces.Load() }

// BreakHeartbeats makes the next n heartbeats of db's sessions statements
// that the server answers with an error (a missing table).
func BreakHeartbeats(db *sql.DB, n int32) {
	var c atomic.Int32
	c.Store(n)
	brokenBeats.Store(db, &c)
}

// WarningArmed reports whether the session of l has made its warning's
// timer.
func (l *Lease) WarningArmed() bool {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return l.m.risk != nil
}

// ObserveLate gives l, a lease granted without an observer, the observer o
// and reports its grant now, as if Lock returned only now.
func (l *Lease) ObserveLate(o health.Observer) {
	l.obs = o
	l.granted(time.Now())
}

// FailStatement runs on the session of l a statement that fails as a
// broken connection does, which ends the session.
func (l *Lease) FailStatement() error {
	return l.m.run(func(context.Context) error { return errors.New("the connection broke") })
}

// StatementsFree reports whether the statement lock of l's session is free.
func (l *Lease) StatementsFree() bool {
	if !l.m.stmt.TryLock() {
		return false
	}
	l.m.stmt.Unlock()
	return true
}

// WarnPastDeadline runs the warning of l's session as its timer would,
// late, once the deadline of its last confirmation passed.
func (l *Lease) WarnPastDeadline() {
	m := l.m
	m.mu.Lock()
	was := m.confirmed
	past := time.Now().Add(-m.cfg.deadline() - time.Millisecond)
	m.confirmed = past
	m.mu.Unlock()
	m.atRisk()
	m.mu.Lock()
	if m.confirmed.Equal(past) { // no confirmation came meanwhile
		m.confirmed = was
	}
	m.mu.Unlock()
}
