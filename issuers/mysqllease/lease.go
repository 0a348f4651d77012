package mysqllease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"

	"github.com/zukhruf/lease/health"

	"sync/atomic"

	"time"
)

// Lease is a GET_LOCK lock held by a session that the issuer shares among
// the leases of one *sql.DB, and the lease that tells its holder when the
// lock may be gone.
//
// A Lease is made by [Lock], [Config.Lock] or a [Locker]; there is no
// useful zero value. Its methods are safe for concurrent use. A Lease is a
// thin view of its lock: its session, which no method returns, keeps the
// heartbeat and the deadline for every lease on it, and loses them all
// when it ends.
type Lease struct {
	ctrl    *controller.Controller
	m       *shared
	name    string
	token   int64
	unclaim func()

	once sync.Once
	err  error // Unlock's outcome, set once

	obs      health.Observer // Config.Observer
	observed atomic.Bool     // counted among m's observers
}

// Lock waits until a session of the issuer holds the GET_LOCK lock of
// subject, and returns the lease of that lock. It is Config{}.Lock.
func Lock(ctx context.Context, db *sql.DB, subject string) (*Lease, error) {
	return Config{}.Lock(ctx, db, subject)
}

// Lock takes the lock named [Config.LockName](subject) with GET_LOCK on a
// session that the issuer shares among the leases of db (see
// [Config.Sessions]), and returns the lease of that lock. The signal's
// subject is subject.
//
// A lock that is free is taken in one statement, GET_LOCK(name, 0), on a
// shared session that is already open: Lock dials nothing and runs no
// check then. The first Lock of a pool, and one that finds every session
// full, opens a session: a connection taken out of db for good (db.Conn),
// the checks below, the session's timeouts, and its watcher, a second
// connection. With [Config.Fence], a second statement takes the token.
//
// A lock held elsewhere is waited for on a session of waits (at most
// [Config.Waiters] for a pool), with GET_LOCK(name, step) in steps of
// Heartbeat, each answered within the step and half the deadline
// (ServerTimeout − Margin) or the wait fails with [ErrUnresponsive]: that
// session holds no other lease, so a blocked statement there stops no
// heartbeat. Once the server grants the lock, that session holds the lease,
// since the lock is the session's. A Lock that must wait while every
// session of waits is busy polls for the lock, with the other Locks that
// poll, on a shared session. A grant of a lock whose previous holder's
// session has ended since (a KILL, not a release) returns [Config.Grace]
// later, once a holder of this package knows.
//
// Lock refuses at once, with an error that names the mistake and wraps its
// cause, a Config out of range, a subject it cannot name, a db whose
// MaxOpenConns is 1, a connection the server refuses (a credential, a
// database, a privilege), a read-only server ([ErrReplica]), a Galera node
// ([ErrGalera]), a server that holds one lock per session (before MySQL
// 5.7 and MariaDB 10.0.2), a session of the pool that already holds the
// lock ([ErrHeld]), and a pooler that shares or moves server sessions
// ([ErrPooled]), before it takes the lock or sets a timeout of the session
// (the probe for a pooler sets a user variable, the session's mark,
// first). These checks run once for each session it opens, not for each
// lease. The README's "what you may get wrong" lists each case.
//
// Opening a session uses two connections of db beside it: one for its
// probe, which it waits for at most the deadline before it fails, and one
// for the watcher.
//
// Lock sets a session's wait_timeout, interactive_timeout,
// net_read_timeout and net_write_timeout to ServerTimeout, turns autocommit
// on and off every statement and idle-transaction timeout.
//
// ctx bounds the wait only; the lease lasts until it is lost or released.
// ctx never reaches a statement of a shared session, whose connection the
// driver would close under every lease on it: the deadline bounds those.
// When ctx ends during a wait, Lock kills the session of waits (KILL
// CONNECTION through another connection of db, once that connection shows
// the same server, bounded by Margin and 2 s), which holds no other lease;
// a polling Lock just leaves the polls. It returns an error wrapping ctx's
// cause: no lock and no waiter are left on the server, and no goroutine in
// the process.
//
// When another lease of this process holds the same lock (same server and
// name), Lock does not return before that lease is lost or released, even
// when the server has already granted the lock.
func (c Config) Lock(ctx context.Context, db *sql.DB, subject string) (*Lease, error) {
	return c.acquire(ctx, db, subject, "Lock", false)
}

// acquire is Lock, and [Locker.TryLock] when try is set: the same session,
// checks and grant, with one GET_LOCK(name, 0) in place of the wait. call
// names the caller's method in panics and, in lower case, in errors.
func (c Config) acquire(ctx context.Context, db *sql.DB, subject, call string, try bool) (*Lease, error) {
	if ctx == nil {
		panic("mysqllease: " + call + " called with a nil context")
	}
	if db == nil {
		panic("mysqllease: " + call + " called with a nil *sql.DB")
	}
	fail := func(err error) (*Lease, error) {
		return nil, fmt.Errorf("mysqllease: %s %s: %w", strings.ToLower(call), quote(subject), err)
	}
	begun := time.Now()
	c, err := c.withDefaults()
	if err != nil {
		return fail(err)
	}
	name, err := c.LockName(subject)
	if err != nil {
		return fail(err)
	}
	if n := db.Stats().MaxOpenConnections; n == 1 {
		return fail(errors.New("the *sql.DB has MaxOpenConns 1: a shared session keeps one connection for as long as it holds leases, and its watcher another, so nothing else could use the pool (set 0, for no limit, or at least 3)"))
	}
	st := setFor(db, c)
	defer st.done()
	l, err := st.lock(ctx, c, subject, name, try)
	if err != nil {
		return fail(err)
	}
	l.granted(begun)
	return l, nil
}

// lock takes the lease of the lock name on a shared session of st: at once,
// with GET_LOCK(name, 0) on the session, when the lock is free and no lease
// of this process holds it; otherwise, for Lock, by a wait on a session of
// its own that joins st once the server grants it the lock. When try is
// set, it takes the lock only if it is free now, and otherwise returns an
// error wrapping [lease.ErrHeld].
func (st *sessionSet) lock(ctx context.Context, c Config, subject, name string, try bool) (*Lease, error) {
	var table string
	if c.Fence != "" {
		table, _ = fenceTable(c.Fence)
	}
	m, err := st.pick(ctx, c, name)
	if err != nil {
		return nil, err
	}
	unclaim, ok := tryClaim(st.lockID(m.s.server, name))
	var holder int64
	if ok {
		got, h, err := m.take(name)
		holder = h
		switch {
		case err != nil:
			unclaim()
			m.giveUp()
			return nil, err
		case got:
			return st.grant(m, c, subject, name, table, unclaim)
		}
		unclaim()
	}
	m.giveUp()
	if try {
		if !ok {
			return nil, fmt.Errorf("%w: another lease of this process holds the lock", lease.ErrHeld)
		}
		return nil, fmt.Errorf("%w: GET_LOCK(name, 0) returned 0: another server session holds the lock", lease.ErrHeld)
	}
	return st.wait(ctx, c, subject, name, table, holder)
}

// grant makes the lease of the lock name that m's session has just taken:
// its fencing token, taken in the session, and its place among the
// session's leases. On an error, it releases the lock.
func (st *sessionSet) grant(m *shared, c Config, subject, name, table string, unclaim func()) (*Lease, error) {
	var token int64
	if table != "" {
		var err error
		if token, err = m.fence(table, name); err != nil {
			m.do("SELECT RELEASE_LOCK("+literal(name)+")"+tail, new(sql.NullInt64))
			unclaim()
			m.giveUp()
			return nil, err
		}
	}
	l := &Lease{ctrl: controller.New(subject), m: m, name: name, token: token, unclaim: unclaim, obs: c.Observer}
	if !m.attach(l) {
		unclaim()
		return nil, fmt.Errorf("%w: the shared session ended as the lock was granted", ErrConnLost)
	}
	return l, nil
}

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (l *Lease) Signal() *signal.Signal {
	if l.ctrl == nil {
		panic("mysqllease: Signal called on a Lease not made by Lock")
	}
	return l.ctrl.Signal()
}

// Name returns the name of the server's lock, [Config.LockName] of the
// subject.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token taken at the grant in the table named by
// [Config.Fence], or 0 if none was named. Each grant of the lock increments
// the lock's row in that table, in the granted session, so every later
// holder has a larger token, across restarts of the server and failovers
// to a replica that has the row. A write that must be refused once a later
// holder has written carries the token and is refused when a larger one was
// seen:
//
//	UPDATE accounts SET balance = ?, token = ? WHERE id = ? AND token <= ?
//
// A write that affected no row was refused: its holder has lost the lock.
func (l *Lease) Token() int64 { return l.token }

// lossCause returns the cause of a loss for a heartbeat's error.
func lossCause(err error) error {
	c := causeOf(err)
	for _, known := range []error{ErrKilled, ErrShutdown, ErrConnLost, ErrPooled} {
		if errors.Is(c, known) {
			return c
		}
	}
	return fmt.Errorf("%w: %w", ErrConnLost, err)
}
