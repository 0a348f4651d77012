package mysqllease

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"sync/atomic"
)

// A shared is a server session that holds the locks of many leases: one
// heartbeat confirms them all, one deadline timer watches them all, and the
// end of the session loses them all at once, which is what they shared.
//
// The session itself is idle between statements, so that a Lock or an
// Unlock runs its one statement at once; the push that a pending read gave
// a lease of its own comes from a second connection, the watcher, blocked
// in GET_LOCK of a lock that the session took first (its watch lock): the
// server grants it to the watcher the moment it ends the session, for a
// KILL, a shutdown, its wait_timeout, and the watcher's grant loses every
// lease of the session. A watcher that ends by itself (killed, its
// connection cut) is started again; one that cannot stay pending fails the
// session, since the push would be gone.
type shared struct {
	set    *sessionSet
	s      *session
	cfg    Config
	watch  string // the watch lock's name
	waited bool   // a wait's session: it holds its one lease, and its end gives the set's place back
	disown func() // ends the session's record among this process's

	ctx    context.Context    // ended by fail or close: cuts a statement in flight
	cancel context.CancelFunc //
	loops  sync.WaitGroup     // the heartbeat and the watcher

	stmt sync.Mutex // one statement at a time on the connection

	observers atomic.Int32 // leases on the session with an observer

	notify   sync.Mutex // held while the events of the session's leases are told
	reported time.Time  // send time of the last confirmation told; notify guards it
	warned   time.Time  // the confirmation whose warning was told; notify guards it

	mu        sync.Mutex
	leases    map[*Lease]struct{}
	pending   int           // Locks that picked the session and have not attached or given up
	dead      bool          // failed or closed: no new lease
	confirmed time.Time     // send time of the last statement answered as sent
	left      time.Duration // the deadline less the time the statement at confirmed was answered
	timer     *time.Timer
	idle      *time.Timer // closes the session once it has been empty for idleLinger
	risk      *time.Timer // the warning (see armRisk), nil until a lease has an observer
	riskFor   time.Time   // the confirmation risk is armed for
}

// idleLinger is how long a shared session with no lease stays open: long
// enough that a Lock following an Unlock finds it, as a goroutine that
// locks and unlocks in turn does, short enough that a process that stopped
// locking gives its sessions back soon.
const idleLinger = 100 * time.Millisecond

// watchTimeout is the watcher's GET_LOCK timeout, 365 days: it waits for
// the session's end, not for a time.
const watchTimeout = "31536000"

// errGone is the error of a statement on a shared session that has ended.
var errGone = fmt.Errorf("%w: the shared session has ended", ErrConnLost)

// newShared makes s, which holds no lock of a lease yet and whose checks and
// timeouts are done, a shared session of st: it takes the session's watch
// lock (the first confirmation), starts the watcher and the heartbeat, and
// returns the session with one pending Lock counted.
func newShared(ctx context.Context, st *sessionSet, s *session, waited bool) (*shared, error) {
	m := &shared{set: st, s: s, cfg: st.cfg, watch: watchPrefix + s.mark, waited: waited, leases: make(map[*Lease]struct{}), pending: 1}
	sent := time.Now()
	var got sql.NullInt64
	if err := s.row(ctx, "SELECT GET_LOCK("+literal(m.watch)+", 0)"+tail, &got); err != nil {
		return nil, fmt.Errorf("take the session's watch lock: %w", causeOf(err))
	}
	if got.Int64 != 1 {
		return nil, fmt.Errorf("take the session's watch lock: GET_LOCK returned %v", got)
	}
	if time.Since(sent) >= m.cfg.deadline() {
		return nil, fmt.Errorf("%w: the session's first statement took longer than the deadline %v", ErrUnresponsive, m.cfg.deadline())
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.disown = ownSession(st.sessionID(s))
	m.confirmed = sent
	m.mu.Lock()
	m.timer = time.AfterFunc(time.Until(sent.Add(m.cfg.deadline())), m.expire)
	m.mu.Unlock()
	armed := make(chan struct{})
	m.loops.Add(2)
	go m.watchLoop(armed)
	go m.heartbeat()
	// The watcher's connection and settings take a round trip or two; its
	// GET_LOCK is sent right after, and reaches the server before the
	// first lease's own statement, which takes a round trip of its own. A
	// pool with no connection to spare for it delays the push, not the
	// Lock: the heartbeat and the deadline hold meanwhile.
	bound := time.NewTimer(m.cfg.deadline())
	defer bound.Stop()
	select {
	case <-armed:
	case <-ctx.Done():
	case <-bound.C:
	}
	return m, nil
}

// watchPrefix begins a watch lock's name; the session's 32-digit mark ends
// it, so that no two sessions share one.
const watchPrefix = "mysqllease:watch:"

// load is how many leases hold the session or are about to; mu is held.
func (m *shared) load() int { return len(m.leases) + m.pending }

// do runs query, whose select list ends with tail, on the session and
// scans its first columns into dest; a statement answered confirms the
// session from its send time. An error of the connection or the session
// fails the session, losing every lease on it; an error the server
// returned for the statement alone (a missing table, a lock wait timeout)
// is returned, and the session lives on. The caller's context never
// reaches the statement: its end would close the connection under every
// lease; the deadline bounds it instead.
func (m *shared) do(query string, dest ...any) error {
	return m.doFor(m.cfg.deadline(), query, dest...)
}

// doFor is do with a statement answered within timeout, or the session is
// taken for silent.
func (m *shared) doFor(timeout time.Duration, query string, dest ...any) error {
	return m.runFor(timeout, func(ctx context.Context) error { return m.s.row(ctx, query, dest...) })
}

// exec runs a statement without a result set on the session, as do does,
// and returns its result.
func (m *shared) exec(query string) (sql.Result, error) {
	var res sql.Result
	err := m.run(func(ctx context.Context) error {
		var err error
		res, err = m.s.conn.ExecContext(ctx, query)
		return err
	})
	return res, err
}

func (m *shared) run(f func(ctx context.Context) error) error {
	return m.runFor(m.cfg.deadline(), f)
}

func (m *shared) runFor(timeout time.Duration, f func(ctx context.Context) error) error {
	_, err := m.runAs(timeout, true, f)
	return err
}

// runAs is runFor, and returns the statement's send time. errConfirms says
// whether an error that the server answered confirms the session, as it
// does for every statement but the heartbeat (see beat).
func (m *shared) runAs(timeout time.Duration, errConfirms bool, f func(ctx context.Context) error) (time.Time, error) {
	m.stmt.Lock()
	sent, moved, failed, err := m.runLocked(timeout, errConfirms, f)
	m.stmt.Unlock()
	// The observers are told after the statement lock is given back: a
	// slow Observer holds up no statement of the session. The leases of a
	// session that failed were lost before it was given back.
	m.report(failed)
	if moved && m.observers.Load() > 0 {
		m.renewed(sent, time.Now())
	}
	return sent, err
}

// runLocked runs f as runAs says, stmt held, and returns its send time,
// whether its answer moved the deadline, and the session's failure when
// the statement failed it: its leases lost, its observers not yet told.
func (m *shared) runLocked(timeout time.Duration, errConfirms bool, f func(ctx context.Context) error) (sent time.Time, moved bool, failed failure, err error) {
	if m.ctx.Err() != nil {
		return sent, false, failed, errGone
	}
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	sent = time.Now()
	err = f(ctx)
	var me *mysql.MySQLError
	switch {
	case err == nil:
	case m.ctx.Err() != nil:
		return sent, false, failed, errGone
	case errors.As(err, &me) && !errors.Is(causeOf(err), ErrKilled) && !errors.Is(causeOf(err), ErrShutdown):
		// The server answered: the session is alive, the statement failed.
		if !errConfirms {
			return sent, false, failed, err
		}
	default:
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: a statement was not answered within %v", ErrUnresponsive, timeout)
		}
		return sent, false, m.lose(lossCause(err)), err
	}
	return sent, m.confirm(sent), failed, err
}

// confirm moves the session's deadline to sent + ServerTimeout − Margin,
// re-arms the warning, and reports whether the deadline moved.
func (m *shared) confirm(sent time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	moved := !m.dead && sent.After(m.confirmed)
	if moved {
		m.confirmed = sent
		m.left = time.Until(sent.Add(m.cfg.deadline()))
		m.timer.Reset(m.left)
		m.armRisk()
	}
	return moved
}

// expire runs when the deadline timer fires: every lease of the session is
// lost unless a confirmation moved the deadline meanwhile.
func (m *shared) expire() {
	m.mu.Lock()
	left := time.Until(m.confirmed.Add(m.cfg.deadline()))
	if left > 0 || m.dead {
		if !m.dead {
			m.timer.Reset(left)
		}
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.fail(fmt.Errorf("%w: no heartbeat confirmed since one sent %v ago (deadline %v)", ErrUnresponsive, -left+m.cfg.deadline(), m.cfg.deadline()))
}

// heartbeat confirms the session every Heartbeat: a statement that also
// checks that the session still holds its watch lock.
func (m *shared) heartbeat() {
	defer m.loops.Done()
	t := time.NewTimer(m.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		if !m.beat() {
			return
		}
		t.Reset(m.cfg.Heartbeat)
	}
}

// beat runs one heartbeat, and reports whether the session lives on.
//
// A heartbeat that fails ends the session, and loses its leases at once,
// in every case but one: its connection's error (a reset, a close, a
// protocol error: the driver cannot resume a connection cut mid-statement,
// and the session's locks are unknown from then on), an interruption or a
// shutdown that the server answered with, an answer of another session,
// and the session's watch lock held by another all lose the leases; a
// heartbeat left unanswered is known only at the deadline, which loses them
// too, and is warned of a third of the span before (see shared.atRisk).
// The one case is an error that the server answered for the statement
// alone (a resource it lacks): the session lives, but the heartbeat did not
// check its watch lock, so it confirms nothing, the deadline stays where
// the last confirmation set it, the observers are told RenewalFailed (then
// AtRisk), and the next heartbeat, a Heartbeat later, tries again.
func (m *shared) beat() bool {
	var holder sql.NullInt64
	q := "SELECT IS_USED_LOCK(" + literal(m.watch) + ")" + tail
	if failBeat(m.s.db) {
		q += " FROM information_schema.mysqllease_no_such_table"
	}
	sent, err := m.runAs(m.cfg.deadline(), false, func(ctx context.Context) error { return m.s.row(ctx, q, &holder) })
	if err != nil {
		if m.ctx.Err() != nil {
			return false
		}
		if m.observers.Load() > 0 {
			m.renewalFailed(sent, err)
		}
		return true
	}
	if !holder.Valid || holder.Int64 != m.s.id {
		m.fail(fmt.Errorf("%w: the session's watch lock is held by %v, not by the session %d", ErrPooled, holder, m.s.id))
		return false
	}
	return true
}

// watchLoop keeps a watcher blocked in GET_LOCK of the session's watch
// lock, on a connection of the pool of its own (never given back), and
// fails the session when the server grants it. armed is closed once the
// first watcher's statement is about to be sent, or the loop gave up.
func (m *shared) watchLoop(armed chan struct{}) {
	defer m.loops.Done()
	once := sync.OnceFunc(func() { close(armed) })
	defer once()
	backoff := firstBackoff
	quick := 0
	for m.ctx.Err() == nil {
		err := m.watchOnce(once)
		if m.ctx.Err() != nil {
			return
		}
		if err == nil {
			m.fail(fmt.Errorf("%w: the server ended the session: its watch lock was granted to the watcher", ErrConnLost))
			return
		}
		// The watcher's connection ended, which a crash, a shutdown or a
		// cut link does to the session's too: a heartbeat now tells, where
		// the next one would tell a Heartbeat later.
		if !m.beat() {
			return
		}
		var short bool
		if err, short = unwrapShort(err); short {
			// The watcher's statement ended within a heartbeat of its
			// send, twice in a row: something cuts it (a readTimeout of
			// the DSN under Heartbeat, a proxy), and the push is gone.
			if quick++; quick >= 2 {
				m.fail(fmt.Errorf("%w: the session's watcher cannot stay pending on the server (is the DSN's readTimeout under Heartbeat?): %w", ErrConnLost, err))
				return
			}
		} else {
			quick = 0
		}
		t := time.NewTimer(backoff)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// shortErr marks a watcher's statement that ended within a heartbeat of
// its send.
type shortErr struct{ err error }

func (e shortErr) Error() string { return e.err.Error() }

func unwrapShort(err error) (error, bool) {
	var s shortErr
	if errors.As(err, &s) {
		return s.err, true
	}
	return err, false
}

// watchOnce runs one watcher: it returns nil when the server granted it the
// watch lock (the session has ended), and an error otherwise.
func (m *shared) watchOnce(armed func()) error {
	conn, err := m.s.db.Conn(m.ctx)
	if err != nil {
		return err
	}
	defer func() {
		conn.Raw(func(any) error { return driver.ErrBadConn })
		conn.Close()
	}()
	var server string
	if err := conn.QueryRowContext(m.ctx, "SELECT "+serverSQL).Scan(&server); err != nil {
		return err
	}
	if server != m.s.server {
		return fmt.Errorf("the pool's connection is on %s, not on the session's server %s", server, m.s.server)
	}
	off := "SET SESSION max_execution_time = 0"
	if m.s.mariadb {
		off = "SET SESSION max_statement_time = 0"
	}
	if _, err := conn.ExecContext(m.ctx, off); err != nil {
		return err
	}
	armed()
	sent := time.Now()
	var got sql.NullInt64
	err = conn.QueryRowContext(m.ctx, "SELECT GET_LOCK("+literal(m.watch)+", "+watchTimeout+")").Scan(&got)
	switch {
	case err == nil && got.Int64 == 1:
		return nil
	case err == nil:
		err = fmt.Errorf("the watcher's GET_LOCK returned %v", got)
	}
	if time.Since(sent) < m.cfg.Heartbeat {
		return shortErr{err}
	}
	return err
}

// fail loses every lease of the session with cause, at once, then ends
// the session: it cuts a statement in flight, closes the connection (the
// server frees the session's locks when it reads the close) and lets the
// process's next leases of those locks be granted. It does nothing once the
// session failed or was closed.
func (m *shared) fail(cause error) {
	m.report(m.lose(cause))
}

// failure is what is left to do of a session's failure once its leases
// are lost: tell their observers, then end the session. Its zero value
// does nothing.
type failure struct {
	cause  error
	leases map[*Lease]struct{}
	lost   []*Lease // the leases with an observer
	ended  bool
}

// lose loses every lease of the session with cause, at once, and cancels
// its context, which cuts a statement in flight and runs no other; the
// rest is report's. It returns the zero failure once the session failed or
// was closed.
func (m *shared) lose(cause error) failure {
	m.mu.Lock()
	if m.dead {
		m.mu.Unlock()
		return failure{}
	}
	m.dead = true
	f := failure{cause: cause, leases: m.leases, ended: true}
	m.leases = nil
	m.mu.Unlock()
	// Every lease is lost before any observer is told. A lease with an
	// observer is told under notify if granted counted it by then; if not,
	// granted tells its loss (see Lease.granted).
	for l := range f.leases {
		if l.ctrl.Lose(cause) && l.obs != nil {
			f.lost = append(f.lost, l)
		}
	}
	m.cancel()
	return f
}

// report tells the observers of the leases that lose lost, then ends the
// session; it is called with no lock of the session held.
func (m *shared) report(f failure) {
	if !f.ended {
		return
	}
	if len(f.lost) > 0 {
		m.notify.Lock()
		for _, l := range f.lost {
			l.lost(f.cause)
		}
		m.notify.Unlock()
	}
	m.end(f.leases)
}

// end stops the session's loops and timers, removes it from its set and
// closes its connection; then it ends the in-process records of leases.
// dead is set.
func (m *shared) end(leases map[*Lease]struct{}) {
	m.mu.Lock()
	m.timer.Stop()
	if m.idle != nil {
		m.idle.Stop()
	}
	if m.risk != nil {
		m.risk.Stop()
	}
	m.mu.Unlock()
	m.cancel()
	m.set.remove(m)
	if m.waited {
		m.set.releaseSlot()
	}
	go func() {
		m.loops.Wait()
		m.s.discard()
		m.disown()
		for l := range leases {
			l.unclaim()
		}
	}()
}

// attach records l as a lease of the session, unless the session has
// ended: then l's lock is gone with it.
func (m *shared) attach(l *Lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending--
	if m.dead {
		return false
	}
	m.leases[l] = struct{}{}
	return true
}

// giveUp ends a pending Lock that took no lease on the session.
func (m *shared) giveUp() {
	m.mu.Lock()
	m.pending--
	m.idleCheck()
	m.mu.Unlock()
}

// detach removes l from the session for its Unlock, and reports whether the
// session still runs; the release that follows counts as pending, so that
// the session is not closed as idle under it.
func (m *shared) detach(l *Lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return false
	}
	delete(m.leases, l)
	m.pending++
	return true
}

// idleCheck starts the idle timer when the session has no lease and no
// pending Lock; mu is held.
func (m *shared) idleCheck() {
	if m.dead || m.load() > 0 {
		return
	}
	linger := idleLinger
	if m.set.alone {
		linger = 0
	}
	if m.idle == nil {
		m.idle = time.AfterFunc(linger, m.closeIdle)
	} else {
		m.idle.Reset(linger)
	}
}

// closeIdle closes the session if it is still empty.
func (m *shared) closeIdle() {
	m.mu.Lock()
	if m.dead || m.load() > 0 {
		m.mu.Unlock()
		return
	}
	m.dead = true
	m.mu.Unlock()
	m.end(nil)
}

// release releases l's lock on the session with RELEASE_LOCK, after l left
// the session's leases.
func (m *shared) release(name string) error {
	defer m.giveUp()
	var got sql.NullInt64
	if err := m.do("SELECT RELEASE_LOCK("+literal(name)+")"+tail, &got); err != nil {
		return err
	}
	if !got.Valid || got.Int64 != 1 {
		err := fmt.Errorf("RELEASE_LOCK returned %v: the session did not hold the lock", got)
		m.fail(fmt.Errorf("%w: %w", ErrPooled, err))
		return err
	}
	return nil
}

// take takes the lock name on the session if it is free now: one statement,
// GET_LOCK(name, 0), which neither waits nor queues. When the lock is held,
// it returns the holder's session id. It returns an error wrapping
// [ErrHeld] when the session held the lock before it (a pooled connection
// that other code left holding it became the session).
func (m *shared) take(name string) (got bool, holder int64, err error) {
	var before, res sql.NullInt64
	if err := m.do("SELECT IS_USED_LOCK("+literal(name)+"), GET_LOCK("+literal(name)+", 0)"+tail, &before, &res); err != nil {
		return false, 0, fmt.Errorf("take the lock: %w", causeOf(err))
	}
	if err := m.heldBefore(name, before); err != nil {
		return false, 0, err
	}
	if !res.Valid {
		return false, 0, fmt.Errorf("take the lock: %w: GET_LOCK returned NULL: the server interrupted it", ErrKilled)
	}
	return res.Int64 == 1, before.Int64, nil
}

// heldBefore returns an error wrapping [ErrHeld] when before, the holder
// of the lock name read just before a GET_LOCK of the session, is the
// session itself: GET_LOCK counted a second hold of a lock the session had,
// and heldBefore gives that one back, leaving the first as it was.
func (m *shared) heldBefore(name string, before sql.NullInt64) error {
	if !before.Valid || before.Int64 != m.s.id {
		return nil
	}
	m.do("SELECT RELEASE_LOCK("+literal(name)+")"+tail, new(sql.NullInt64))
	return fmt.Errorf("%w: session %d", ErrHeld, m.s.id)
}

// fence increments the lock's row of table (quoted) in the session and
// returns the new token.
func (m *shared) fence(table, name string) (int64, error) {
	res, err := m.exec("INSERT INTO " + table + " (name, token) VALUES (" + literal(name) +
		", LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)")
	if err != nil {
		return 0, fmt.Errorf("fencing token from %s: %w", table, err)
	}
	token, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("fencing token from %s: %w", table, err)
	}
	return token, nil
}

// brokenBeats holds, for the tests, the pools whose next heartbeats run a
// statement that the server refuses, and how many: *sql.DB → *atomic.Int32.
var brokenBeats sync.Map

// failBeat reports whether the next heartbeat of a session of db is one
// that brokenBeats breaks.
func failBeat(db *sql.DB) bool {
	v, ok := brokenBeats.Load(db)
	return ok && v.(*atomic.Int32).Add(-1) >= 0
}
