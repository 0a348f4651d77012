package pglease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"

	"github.com/zukhruf/lease/health"
)

// Lease is a session-level advisory lock, and the lease that tells its
// holder when the lock is gone.
//
// A Lease is made by [Lock], [Config.Lock] or a [Locker]; there is no
// useful zero value. Its methods are safe for concurrent use.
//
// A Lease on a shared session (the default) is a thin view of its lock: the
// session, a connection the issuer took out of the pool for good, keeps a
// read pending to see at once a FATAL error or the end of the connection,
// and sends the heartbeats that confirm every lease on it; two goroutines
// a session, none a lease. A Lease alone on its session
// ([Config.OwnSession]) owns its connection and two goroutines of its own,
// which stop at the loss or at the release; [Lease.Unlock] closes it.
type Lease struct {
	ctrl    *controller.Controller
	sh      *shared // the shared session, or nil for a session of its own
	s       *session
	nc      net.Conn
	cfg     Config
	key     int64
	token   int64
	unclaim func()

	quit     chan struct{} // closed to stop the heartbeats
	quitOnce sync.Once
	kept     chan struct{} // closed when the heartbeats stopped
	read     chan struct{} // closed when the pending read stopped

	mu        sync.Mutex
	sent      []time.Time   // send times of the heartbeats not yet confirmed
	confirmed time.Time     // send time of the last confirmed heartbeat
	stopping  bool          // Unlock waits for the heartbeats in flight
	left      time.Duration // the deadline less the time the heartbeat at confirmed was confirmed

	// obsMu orders the events told to cfg.Observer: it is held while one
	// is told, and taken only where there is an Observer, never on the
	// paths of Err, the heartbeats or the loss.
	obsMu    sync.Mutex
	observed bool          // guarded by obsMu: the grant was told, and neither the loss nor the release yet
	watch    *health.Watch // with an Observer, on a session of its own: AtRisk when its heartbeats go unconfirmed

	once sync.Once
	err  error // Unlock's outcome, set once
}

// Lock waits until a session shared by the leases of pool holds the
// session-level advisory lock of [Key](subject), and returns the lease of
// that lock. It is Config{}.Lock.
func Lock(ctx context.Context, pool *pgxpool.Pool, subject string) (*Lease, error) {
	return Config{}.Lock(ctx, pool, subject)
}

// Lock waits until a session of pool's holds the session-level advisory
// lock of c.Key(subject) and returns the lease of that lock. The signal's
// subject is subject.
//
// By default the session is one that the leases of pool and c share (see
// [Config.Sessions]): Lock opens one, a connection taken out of the pool
// for good (Acquire, then Hijack), with the checks and settings below,
// only when the pool's leases have none with room; then it takes the lock
// with pg_try_advisory_lock, and the fencing token in the same statement.
// When another session holds the lock, Lock waits in the process until a
// release that a lease of any process announces (LISTEN/NOTIFY), or its
// next try, which comes at most pollMax (500 ms) after the previous, takes
// it; no statement waits on the server. A lock taken on a try after a
// release that nobody announced (a holder's session ended, a lock released
// by hand) is returned a Deadline later, or at an announcement heard
// meanwhile, so that the old holder's lease is lost first. With [Config.OwnSession], Lock
// takes a connection out of pool for the lease alone and waits with
// pg_advisory_lock.
//
// Lock refuses at once, with an error that names the mistake and wraps
// its cause, a Config out of range, a connection the server refuses (a
// credential, a database, a role, a permission), a name that does not
// resolve, an address where nothing listens; it retries with backoff, until
// ctx ends, a connection that may succeed later (a server starting or
// shutting down, too many connections), and then returns an error that
// wraps both ctx's cause and the last attempt's. The README's "what you may
// get wrong" lists each case. The SQL that Lock and the lease send names
// every function, view and operator with its schema, pg_catalog, so that
// the session's search_path cannot put others in their place; Lock checks
// in pg_locks that the server granted the lock to its session
// ([ErrNotGranted]).
//
// Before it changes anything in the session, Lock refuses a connection
// through a pooler, with an error wrapping [ErrPooled], unless
// [Config.SessionPooler] is set; it refuses a standby in recovery with
// [ErrStandby], and a connection whose session already holds the lock.
//
// ctx bounds the wait only, for the lock and for the fencing token's row
// (see [Lease.Token]); the lease lasts until it is lost or released. When
// ctx ends at any step, Lock cancels the statement under way on the server
// (a cancel request), releases the lock if the server granted it, closes the
// connection and returns an error wrapping ctx's cause: no lock and no
// waiter are left on the server, and no goroutine in the process. If the
// server does not answer the cancel within Deadline, Lock closes the
// connection at once, and the server drops the waiter when it sees the
// connection gone (Lock sets client_connection_check_interval to Heartbeat
// for that).
//
// When another lease of this process holds the same lock (same server,
// database and key), Lock does not return before that lease is lost or
// released, even when the server has already granted the lock.
//
// Lock sets the session's idle_session_timeout, tcp_user_timeout,
// tcp_keepalives_idle, tcp_keepalives_interval, tcp_keepalives_count and
// client_connection_check_interval (see [Config]), and turns off its
// statement_timeout; it turns off lock_timeout on a session of its own,
// which would otherwise end the wait whatever ctx says, and sets it to 10
// ms on a shared session, where only the fencing token's write may wait,
// and is retried. A session of its own ends with the lease, and the
// settings with it; a shared session ends a few heartbeats after its last
// lease.
func (c Config) Lock(ctx context.Context, pool *pgxpool.Pool, subject string) (*Lease, error) {
	return c.lock(ctx, pool, subject, false)
}

// lock is Lock, and with try the TryLock of a [Locker]: the same steps,
// but the lock is asked for with pg_try_advisory_lock, and a lock held by
// another session, or by a live lease of this process, fails at once with
// an error wrapping [lease.ErrHeld].
func (c Config) lock(ctx context.Context, pool *pgxpool.Pool, subject string, try bool) (*Lease, error) {
	call, op := "Lock", "lock"
	if try {
		call, op = "TryLock", "trylock"
	}
	if ctx == nil {
		panic("pglease: " + call + " called with a nil context")
	}
	checkPool(pool, call)
	fail := func(err error) (*Lease, error) { return nil, fmt.Errorf("pglease: %s %s: %w", op, quote(subject), err) }
	begun := time.Now()
	c, err := c.withDefaults()
	if err != nil {
		return fail(err)
	}
	key := c.Key(subject)
	if !c.OwnSession {
		l, err := c.lockShared(ctx, pool, key, subject, try)
		if err != nil {
			return fail(err)
		}
		l.granted(begun)
		return l, nil
	}
	if err := step(ctx, stepAcquire); err != nil {
		return fail(err)
	}
	pconn, err := acquire(ctx, pool)
	if err != nil {
		return fail(err)
	}
	s := newSession(pconn.Hijack(), c.Deadline)
	l, err := s.lock(ctx, c, pool, key, subject, try)
	if err != nil {
		return fail(err)
	}
	l.granted(begun)
	return l, nil
}

// lock takes the lease on s, which it owns from now on: on an error, it
// releases what it took and closes s. With try, it asks for the lock once
// and refuses a lock held by another session or by a live lease of this
// process with an error wrapping [lease.ErrHeld]; nothing waits on the
// server or in the process.
func (s *session) lock(ctx context.Context, c Config, pool *pgxpool.Pool, key int64, subject string, try bool) (*Lease, error) {
	held := false // the session may hold the lock
	fail := func(err error) (*Lease, error) {
		s.abandon(key, held)
		return nil, err
	}
	if err := step(ctx, stepCheck); err != nil {
		return fail(err)
	}
	id, pooled, err := s.check(ctx, c, key)
	if err != nil {
		return fail(err)
	}
	// The probe runs before the session is changed: a pooler that shares
	// it would hand the settings and the mark to its other clients.
	if pooled {
		if err := step(ctx, stepProbe); err != nil {
			return fail(err)
		}
		if err := s.probe(ctx, pool); err != nil {
			return fail(err)
		}
	}
	if err := step(ctx, stepSettings); err != nil {
		return fail(err)
	}
	if err := s.set(ctx, c, false); err != nil {
		return fail(err)
	}
	if err := step(ctx, stepWait); err != nil {
		return fail(err)
	}
	if try {
		held, err = s.try(ctx, key)
	} else {
		held, err = s.wait(ctx, key)
	}
	if err != nil {
		return fail(err)
	}
	if err := step(ctx, stepClaim); err != nil {
		return fail(err)
	}
	var unclaim func()
	if try {
		// The server granted the lock, so another lease of this process
		// that holds it is about to read its loss: held all the same.
		var ok bool
		if unclaim, ok = tryClaim(id); !ok {
			return fail(fmt.Errorf("%w: another lease of this process holds the lock", lease.ErrHeld))
		}
	} else if unclaim, err = claim(ctx, id); err != nil {
		return fail(fmt.Errorf("the wait was cut by its context while another lease of this process held the lock: %w", err))
	}
	if err := step(ctx, stepFence); err != nil {
		unclaim()
		return fail(err)
	}
	token, err := s.fence(ctx, c.Fence, key)
	if err != nil {
		unclaim()
		return fail(err)
	}
	// The first confirmation: the server answered a statement sent at sent
	// while the session held the lock, and any silence it counts starts
	// after it received that statement.
	sent := time.Now()
	if err := s.confirm(key, c.Deadline); err != nil {
		unclaim()
		return fail(err)
	}
	l := &Lease{
		ctrl:      controller.New(subject),
		s:         s,
		nc:        s.pc.Conn(),
		cfg:       c,
		key:       key,
		token:     token,
		unclaim:   unclaim,
		quit:      make(chan struct{}),
		kept:      make(chan struct{}),
		read:      make(chan struct{}),
		confirmed: sent,
	}
	if c.Observer != nil {
		l.watch = new(health.Watch) // before the goroutines that arm it
	}
	go l.keep()
	go l.follow()
	return l, nil
}

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (l *Lease) Signal() *signal.Signal { return l.ctrl.Signal() }

// Key returns the advisory lock key, [Config.Key] of the subject.
func (l *Lease) Key() int64 { return l.key }

// Token returns the fencing token taken at the grant in the table named by
// [Config.Fence], or 0 if none was named. Each grant of the lock increments
// the key's row in that table, in the granted session, so every later
// holder has a larger token. A write that must be refused once the lease is
// lost checks the token in its WHERE clause, in the same statement:
//
//	UPDATE accounts SET ... WHERE ... AND
//	  (SELECT token FROM lease_tokens WHERE key = $1 FOR SHARE) = $2
//
// FOR SHARE makes a later holder's increment wait for the write's
// transaction, so no write passes the check after a later grant.
func (l *Lease) Token() int64 { return l.token }

// Unlock releases the lease: it ends the signal first, so that nothing the
// server or the connection reports afterwards loses it.
//
// On a shared session, Unlock then releases the lock with pg_advisory_unlock,
// and a statement sent after it wakes the Locks of any process that marked
// their wait for it; Unlock waits for the release's answer, however long the
// session takes to give it within its deadline (ctx does not cut it: the release
// must be known). It returns nil once the lock is released; an error
// wrapping [ErrSessionEnded] if the session ended first, which freed the
// lock, or if the release failed, which ends the session (and loses its
// other leases) to free it; an error wrapping the loss if the lease was lost
// before.
//
// On a session of its own ([Config.OwnSession]), Unlock stops the
// heartbeats and the pending read, and waits, bounded by ctx and by
// Deadline, for the replies to the heartbeats in flight; then it releases
// the lock with pg_advisory_unlock, bounded by Deadline, and closes the
// lease's connection, which ends its session.
//
// Unlock returns nil once pg_advisory_unlock released the lock. Otherwise
// the lock was freed, or will be, by the end of the session, and the error
// says which: it wraps [ErrSessionEnded] when ctx or Deadline ended the wait
// for the heartbeats first, or the release failed (the server frees the lock
// when it sees the session end, at the latest ServerTimeout after it last
// heard from it); it wraps the loss when the lease was lost before Unlock.
// Either way the signal was never lost by the release, and the fencing token
// still refuses the holder's writes once another holder has taken the lock.
// Successive calls return the first call's result.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("pglease: Unlock called with a nil context")
	}
	l.once.Do(func() {
		defer l.released()
		ctx, cancel := releaseContext(ctx)
		defer cancel()
		if err := l.release(ctx); err != nil {
			l.err = fmt.Errorf("pglease: unlock %s: %w", quote(l.ctrl.Subject()), err)
		}
	})
	return l.err
}

func (l *Lease) release(ctx context.Context) error {
	if l.sh != nil {
		return l.releaseShared()
	}
	ended := l.ctrl.End()
	l.unclaim()
	l.quitOnce.Do(func() { close(l.quit) })
	<-l.kept
	defer l.s.close()
	l.mu.Lock()
	l.stopping = true
	inFlight := len(l.sent)
	l.mu.Unlock()
	if inFlight == 0 {
		l.nc.SetReadDeadline(time.Unix(1, 0))
	}
	bound := time.NewTimer(l.cfg.Deadline)
	defer bound.Stop()
	var cut error
	select {
	case <-l.read:
	case <-ctx.Done():
		cut = fmt.Errorf("the release's context ended: %w", context.Cause(ctx))
	case <-bound.C:
		cut = fmt.Errorf("the deadline %v passed", l.cfg.Deadline)
	}
	if cut != nil {
		l.nc.SetReadDeadline(time.Unix(1, 0))
		<-l.read
	}
	if !ended {
		return lostBefore{l.ctrl.Signal().Err()}
	}
	l.mu.Lock()
	unanswered := len(l.sent)
	l.mu.Unlock()
	if unanswered > 0 {
		if cut == nil {
			cut = errNoReply
		}
		return fmt.Errorf("%w: %d heartbeats were not answered before %w", ErrSessionEnded, unanswered, cut)
	}
	if l.s.pc.IsClosed() {
		return fmt.Errorf("%w: the connection failed as the lease was released", ErrSessionEnded)
	}
	l.nc.SetDeadline(time.Time{})
	rctx, cancel := context.WithTimeout(context.Background(), l.cfg.Deadline)
	defer cancel()
	row, err := l.s.query(rctx, fmt.Sprintf(unlockSQL, l.key, l.s.ours()))
	if err != nil {
		return fmt.Errorf("%w: release the lock: %w", ErrSessionEnded, err)
	}
	if string(row[0]) != "t" {
		return fmt.Errorf("%w: release the lock: the session did not hold it", ErrSessionEnded)
	}
	return nil
}

// lostBefore is the error of an Unlock of a lease lost before it: it
// wraps the loss, a lost.Error, and says its cause without the subject,
// which the Unlock's error already names.
type lostBefore struct{ loss error }

func (e lostBefore) Error() string {
	cause := errors.Unwrap(e.loss)
	if cause == nil {
		cause = e.loss
	}
	return "the lease was lost before: " + cause.Error()
}

func (e lostBefore) Unwrap() error { return e.loss }

// errNoReply stands for a pending read that ended without a reply to every
// heartbeat in flight and without a cut, as when the connection failed.
var errNoReply = fmt.Errorf("the connection ended")

// close closes a lost lease's connection, which ends its session if the
// server did not.
func (l *Lease) close() {
	if l.ctrl.Signal().Err() == nil {
		return // released: Unlock closes it
	}
	l.s.close()
}

// The steps of Lock, in order, at which its context is checked (and a
// test's hook runs, see export_test.go).
const (
	stepAcquire  = "acquire"  // take a connection out of the pool
	stepCheck    = "check"    // the pooler, standby and held checks
	stepProbe    = "probe"    // the check that a pooler does not share the session
	stepSettings = "settings" // the session's timeouts
	stepWait     = "wait"     // pg_advisory_lock, or pg_try_advisory_lock for TryLock
	stepClaim    = "claim"    // the process's other leases of the lock
	stepFence    = "fence"    // the fencing token
)

// stepHook, if not nil, runs before each step of Lock.
var stepHook func(ctx context.Context, step string)

// step runs the hook and returns ctx's cause if ctx has ended.
func step(ctx context.Context, name string) error {
	if stepHook != nil {
		stepHook(ctx, name)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("cut by its context before step %q: %w", name, context.Cause(ctx))
	}
	return nil
}

// pid reads a pg_backend_pid() column.
func pid(col []byte) uint32 {
	var p uint32
	for _, b := range col {
		if b < '0' || b > '9' {
			return 0
		}
		p = p*10 + uint32(b-'0')
	}
	return p
}
