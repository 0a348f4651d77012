package mysqllease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

// Lease is a GET_LOCK lock held by a session of its own, and the lease that
// tells its holder when the lock may be gone.
//
// A Lease is made by [Lock], [Config.Lock] or a [Locker]; there is no
// useful zero value. Its methods are safe for concurrent use. The Lease
// owns its connection, taken out of the pool with db.Conn: no method
// returns it, the pool does not get it back, and [Lease.Unlock] closes it.
// One goroutine keeps a heartbeat pending on it and a timer watches the
// deadline; both stop at the loss or at the release, whichever comes first.
type Lease struct {
	ctrl    *controller.Controller
	s       *session
	cfg     Config
	name    string
	token   int64
	unclaim func()

	hctx     context.Context    // the heartbeats' context
	hcancel  context.CancelFunc // closes the connection under a pending heartbeat
	stopping atomic.Bool        // Unlock has begun: the heartbeats end
	kept     chan struct{}      // closed when the heartbeats stopped

	mu        sync.Mutex
	confirmed time.Time // send time of the last confirmed heartbeat
	timer     *time.Timer

	once sync.Once
	err  error // Unlock's outcome, set once
}

// Lock takes a connection of its own out of db, waits until its session
// holds the GET_LOCK lock of subject, and returns the lease of that lock. It
// is Config{}.Lock.
func Lock(ctx context.Context, db *sql.DB, subject string) (*Lease, error) {
	return Config{}.Lock(ctx, db, subject)
}

// Lock takes a connection out of db for the lease's whole life (db.Conn),
// waits until its session holds the lock named [Config.LockName](subject),
// with GET_LOCK, and returns the lease of that lock. The signal's subject
// is subject.
//
// Lock refuses at once, with an error that names the mistake and wraps its
// cause, a Config out of range, a subject it cannot name, a db whose
// MaxOpenConns is 1 (the lease keeps one connection, and Unlock's KILL QUERY
// needs another), a connection the server refuses (a credential, a
// database, a privilege), a read-only server ([ErrReplica]), a Galera node
// ([ErrGalera]), a session that already holds the lock ([ErrHeld]), and a
// pooler that shares or moves server sessions ([ErrPooled]), before it
// takes the lock or sets a timeout of the session (the probe for a pooler
// sets a user variable, the session's mark, first). The README's "what you
// may get wrong" lists each case.
//
// A Lock in progress uses two connections of db: its own, and one for its
// probe, which it waits for at most the deadline (ServerTimeout − Margin)
// before it fails: a pool too small for the Locks in progress fails them
// rather than deadlock them.
//
// Lock sets the session's wait_timeout, interactive_timeout,
// net_read_timeout and net_write_timeout to ServerTimeout, turns autocommit
// on and off every statement and idle-transaction timeout, and lets the
// fencing token's row and table wait as long as ctx does.
//
// ctx bounds the wait only; the lease lasts until it is lost or released.
// Lock waits in steps of Heartbeat (GET_LOCK(name, Heartbeat)), each
// answered within Heartbeat plus the deadline (ServerTimeout − Margin) or
// the wait fails with [ErrUnresponsive].
// When ctx ends during the wait, the driver closes the connection at once;
// Lock kills the session (KILL CONNECTION through another connection of db,
// once that connection shows the same server, bounded by Margin and 2 s) and
// returns an error wrapping ctx's cause: no lock and no waiter are left on
// the server, and no goroutine in the process.
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
	c, err := c.withDefaults()
	if err != nil {
		return fail(err)
	}
	name, err := c.LockName(subject)
	if err != nil {
		return fail(err)
	}
	if n := db.Stats().MaxOpenConnections; n == 1 {
		return fail(errors.New("the *sql.DB has MaxOpenConns 1: the lease keeps one connection for its whole life and Unlock needs another for KILL QUERY, so nothing else could use the pool (set 0, for no limit, or at least 2 more than the leases it holds)"))
	}
	conn, err := connect(ctx, db)
	if err != nil {
		return fail(err)
	}
	s := &session{db: db, conn: conn, grace: min(c.Margin, 2*time.Second), bound: c.deadline()}
	l, err := s.lock(ctx, c, subject, name, try)
	if err != nil {
		return fail(err)
	}
	return l, nil
}

// lock takes the lease on s, which it owns from now on: on an error, it
// kills and closes s. When try is set, it takes the lock only if no session
// of the server and no lease of this process holds it now, and otherwise
// returns an error wrapping [lease.ErrHeld].
func (s *session) lock(ctx context.Context, c Config, subject, name string, try bool) (*Lease, error) {
	// Until its timeouts are set, the session is as the pool gave it: a
	// refusal gives it back untouched (it may be another user's, through a
	// pooler, or hold that user's lock).
	giveBack := func(err error) (*Lease, error) {
		s.conn.Close()
		return nil, err
	}
	fail := func(err error) (*Lease, error) {
		s.abandon()
		return nil, err
	}
	if err := s.check(ctx, name); err != nil {
		return giveBack(err)
	}
	if err := s.probe(ctx); err != nil {
		return giveBack(err)
	}
	if err := s.set(ctx, c); err != nil {
		return fail(err)
	}
	var table string
	if c.Fence != "" {
		table, _ = fenceTable(c.Fence)
		if err := s.checkFence(ctx, table, name); err != nil {
			return fail(err)
		}
	}
	var unclaim func()
	if try {
		if err := s.try(ctx, name, c.deadline()); err != nil {
			if errors.Is(err, lease.ErrHeld) {
				// GET_LOCK(name, 0) left the session holding and awaiting
				// nothing: the close ends it, no KILL needed.
				s.discard()
				return nil, err
			}
			return fail(err)
		}
		var ok bool
		if unclaim, ok = tryClaim(lockID{s.server, name}); !ok {
			// The server granted the lock because the session of this
			// process's lease has ended, which that lease has not read
			// yet: it is live, and the grant is given back before TryLock
			// returns.
			err := fmt.Errorf("%w: another lease of this process holds the lock", lease.ErrHeld)
			if s.release(ctx, name) != nil {
				return fail(err)
			}
			s.discard()
			return nil, err
		}
	} else {
		if _, err := s.wait(ctx, name, c.Heartbeat, c.deadline()); err != nil {
			return fail(err)
		}
		var err error
		if unclaim, err = claim(ctx, lockID{s.server, name}); err != nil {
			return fail(fmt.Errorf("the wait was cut by its context while another lease of this process held the lock: %w", err))
		}
	}
	var token int64
	if table != "" {
		var err error
		if token, err = s.fence(ctx, table, name); err != nil {
			unclaim()
			return fail(err)
		}
	}
	// The first confirmation: the server answered a statement sent at sent
	// while the session held the lock, and any silence it counts starts
	// after it received that statement.
	sent := time.Now()
	if err := s.confirm(ctx, name, token); err != nil {
		unclaim()
		return fail(err)
	}
	if time.Since(sent) >= c.deadline() {
		unclaim()
		return fail(fmt.Errorf("%w: the grant's confirmation took longer than the deadline %v", ErrUnresponsive, c.deadline()))
	}
	hctx, hcancel := context.WithCancel(context.Background())
	l := &Lease{
		ctrl:      controller.New(subject),
		s:         s,
		cfg:       c,
		name:      name,
		token:     token,
		unclaim:   unclaim,
		hctx:      hctx,
		hcancel:   hcancel,
		kept:      make(chan struct{}),
		confirmed: sent,
	}
	// expire takes mu first: it cannot run before the timer is stored.
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(sent.Add(c.deadline())), l.expire)
	l.mu.Unlock()
	go l.keep()
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

// keep sends the heartbeats: SELECT SLEEP(Heartbeat), the next as soon as
// the last returns, so that a read is always pending on the connection and
// its end is seen at once. Each one answered as sent confirms the session
// from its send time.
func (l *Lease) keep() {
	defer close(l.kept)
	q := "SELECT SLEEP(" + seconds(l.cfg.Heartbeat) + "), IS_USED_LOCK(" + literal(l.name) + ")" + tail
	for !l.stopping.Load() {
		sent := time.Now()
		var slept, holder sql.NullInt64
		err := l.s.row(l.hctx, q, &slept, &holder)
		if l.stopping.Load() {
			return // Unlock interrupted the heartbeat, or ended the lease
		}
		switch {
		case err != nil:
			l.lose(lossCause(err))
			return
		case !slept.Valid || slept.Int64 != 0:
			l.lose(fmt.Errorf("%w: SLEEP returned %v: the server interrupted the heartbeat", ErrKilled, slept))
			return
		case !holder.Valid || holder.Int64 != l.s.id:
			l.lose(fmt.Errorf("%w: the lock is held by %v, not by the lease's session %d", ErrPooled, holder, l.s.id))
			return
		}
		l.confirm(sent)
	}
}

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

// confirm moves the deadline to sent + ServerTimeout − Margin.
func (l *Lease) confirm(sent time.Time) {
	l.mu.Lock()
	if sent.After(l.confirmed) {
		l.confirmed = sent
		l.timer.Reset(time.Until(sent.Add(l.cfg.deadline())))
	}
	l.mu.Unlock()
}

// expire runs when the deadline timer fires: the lease is lost unless a
// confirmation moved the deadline meanwhile.
func (l *Lease) expire() {
	l.mu.Lock()
	left := time.Until(l.confirmed.Add(l.cfg.deadline()))
	if left > 0 {
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(fmt.Errorf("%w: no heartbeat confirmed since one sent %v ago (deadline %v)", ErrUnresponsive, -left+l.cfg.deadline(), l.cfg.deadline()))
}

// lose loses the lease with cause, then closes its connection, which ends
// a pending heartbeat, and lets the process's next lease of the lock be
// granted. It does nothing once the lease was released.
func (l *Lease) lose(cause error) {
	if !l.ctrl.Lose(cause) {
		return
	}
	l.timer.Stop()
	l.hcancel()
	go func() {
		<-l.kept
		l.s.discard()
		l.unclaim()
	}()
}
