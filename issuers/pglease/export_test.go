package pglease

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The steps of Lock, for SetStepHook.
const (
	StepAcquire  = stepAcquire
	StepCheck    = stepCheck
	StepSettings = stepSettings
	StepProbe    = stepProbe
	StepWait     = stepWait
	StepClaim    = stepClaim
	StepFence    = stepFence
)

// SetStepHook makes Lock call f before each of its steps, with its context;
// nil removes it. It must not be called while a Lock runs.
func SetStepHook(f func(ctx context.Context, step string)) { stepHook = f }

// SetTimeouts sets the session timeouts that Lock sets for a lease of cfg,
// without taking a lock.
func SetTimeouts(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	s := newSession(conn, c.Deadline)
	if _, _, err := s.check(ctx, c, 0); err != nil {
		return err
	}
	return s.set(ctx, c, false)
}

// Claim records a live lease of this process on the lock of key in conn's
// server and database, as Lock does once the server grants it, and returns
// the func that ends the record.
func Claim(ctx context.Context, conn *pgx.Conn, key int64) (func(), error) {
	id := lockID{key: key}
	err := conn.QueryRow(ctx, `select (select system_identifier::text from pg_control_system()),
		(select oid from pg_database where datname = current_database())`).Scan(&id.system, &id.db)
	if err != nil {
		return nil, err
	}
	return claim(ctx, id)
}

// SetLockSQL makes Lock wait for the lock with sql, a format of the key
// (%d) and the session's condition (%s), and returns the func that puts
// the statement back. It must not be called while a Lock runs.
func SetLockSQL(sql string) (restore func()) {
	old := lockSQL
	lockSQL = sql
	return func() { lockSQL = old }
}

// CloseIdleSessions ends at once every shared session that no lease or
// Lock uses, as each would end after its idle heartbeats, and waits for
// their goroutines.
func CloseIdleSessions() { closeIdle() }

// SharedSessions returns how many shared sessions are open in the process,
// and how many leases they hold.
func SharedSessions() (sessions, leases int) { return sessionCount() }

// Waiting returns how many Locks of this process wait for the lock of key
// on shared sessions: held by another session, or by another lease of the
// process.
func Waiting(key int64) int {
	waiting.Lock()
	defer waiting.Unlock()
	return waiting.m[key]
}

// StatementsSent returns how many statements the shared sessions of this
// process have sent, heartbeats among them.
func StatementsSent() int64 { return statementsSent.Load() }

// SetLeasesPerSession sets how many leases a shared session takes before
// the pool opens another, and returns the func that puts it back. It must
// not be called while a Lock runs.
func SetLeasesPerSession(n int) (restore func()) {
	old := leasesPerSession
	leasesPerSession = n
	return func() { leasesPerSession = old }
}

// WithDefaults returns cfg with the defaults Lock uses for its zero fields,
// or the error Lock returns for it.
func WithDefaults(cfg Config) (Config, error) { return cfg.withDefaults() }

// SetNotifyCall replaces the expression that announces a release (the key
// is its %[2]d) until the returned func restores it. It must not be called
// while an Unlock runs.
func SetNotifyCall(expr string) (restore func()) {
	old, oldSQL := notifyCall, notifySQL
	notifyCall = expr
	notifySQL = strings.Replace(notifySQL, old, expr, 1)
	return func() { notifyCall, notifySQL = old, oldSQL }
}

// SetTryStatement makes a Lock on a shared session run the prepared
// statement name in place of its try, until the returned func. It must not
// be called while a Lock runs.
func SetTryStatement(name string) (restore func()) {
	old := tryStatement
	tryStatement = name
	return func() { tryStatement = old }
}

// SetPolls sets the first and the longest wait between two tries of a
// Lock on a shared session, until the returned func. It must not be called
// while a Lock runs.
func SetPolls(first, longest time.Duration) (restore func()) {
	f, m := pollFirst, pollMax
	pollFirst, pollMax = first, longest
	return func() { pollFirst, pollMax = f, m }
}

// RiskArms returns how many times the watch of l's shared session was
// armed, and the session, to compare with another lease's; 0 and nil for a
// lease of its own session.
func RiskArms(l *Lease) (int64, any) {
	if l.sh == nil {
		return 0, nil
	}
	return l.sh.riskArms.Load(), l.sh
}
