package pglease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

// The defaults of [Config].
const (
	DefaultHeartbeat     = time.Second
	DefaultDeadline      = 5 * time.Second
	DefaultServerTimeout = 10 * time.Second
)

// Config sets how a lease confirms its session. The zero Config uses the
// defaults; [Lock] is Config{}.Lock.
//
// The deadline rule: a lease is lost once no heartbeat sent in the last
// Deadline has been confirmed, and Lock sets the session's server timeouts so
// that PostgreSQL frees the lock of a silent session no sooner than
// ServerTimeout after the last heartbeat it received, which it received after
// that heartbeat was sent. Deadline < ServerTimeout therefore makes a silent
// lease lost before the server could free its lock, as long as the two
// machines' clocks run at the same rate (they measure intervals, not
// instants).
type Config struct {
	// Heartbeat is the time between two heartbeats (DefaultHeartbeat if
	// zero). A heartbeat is one Sync message, answered by ReadyForQuery.
	Heartbeat time.Duration

	// Deadline is how long after sending a heartbeat the lease stays live
	// without a later one confirmed (DefaultDeadline if zero). It must be
	// longer than Heartbeat plus the round trip, or the lease is lost for
	// nothing.
	Deadline time.Duration

	// ServerTimeout is the silence after which the server ends the lease's
	// session and frees its lock (DefaultServerTimeout if zero); it must be
	// longer than Deadline. Lock sets it for the session as
	// idle_session_timeout and tcp_user_timeout, and sets the TCP keepalives
	// so that they give up no sooner.
	ServerTimeout time.Duration

	// Fence, if not nil, names a table (key bigint primary key, token bigint
	// not null) in which Lock takes the lease's fencing token, in the
	// lease's session once the lock is granted: see [Lease.Token].
	Fence pgx.Identifier
}

func (c Config) withDefaults() (Config, error) {
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Deadline == 0 {
		c.Deadline = DefaultDeadline
	}
	if c.ServerTimeout == 0 {
		c.ServerTimeout = DefaultServerTimeout
	}
	switch {
	case c.Heartbeat < 0 || c.Deadline < 0 || c.ServerTimeout < 0:
		return c, fmt.Errorf("negative duration in %+v", c)
	case c.Heartbeat >= c.Deadline:
		return c, fmt.Errorf("heartbeat %v not shorter than the deadline %v", c.Heartbeat, c.Deadline)
	case c.Deadline >= c.ServerTimeout:
		return c, fmt.Errorf("deadline %v not shorter than the server timeout %v", c.Deadline, c.ServerTimeout)
	}
	return c, nil
}

// Lease is a session-level advisory lock held by a connection, and the lease
// that tells its holder when the lock is gone.
//
// A Lease is made by [Lock]; there is no useful zero value. Its methods are
// safe for concurrent use. From Lock until [Lease.Unlock] returns, the Lease
// owns the connection: it keeps a read pending on it to see at once a FATAL
// error or the end of the connection, and sends heartbeats on it; the holder
// must not use it (pgx reports it busy). Two goroutines do this work; both
// stop at the loss or at the release, whichever comes first.
type Lease struct {
	ctrl    *controller.Controller
	conn    *pgx.Conn
	nc      net.Conn
	cfg     Config
	key     int64
	token   int64
	saved   []string // the session settings to put back
	unclaim func()

	quit     chan struct{} // closed to stop the heartbeats
	quitOnce sync.Once
	kept     chan struct{} // closed when the heartbeats stopped
	read     chan struct{} // closed when the pending read stopped

	mu        sync.Mutex
	sent      []time.Time // send times of the heartbeats not yet confirmed
	confirmed time.Time   // send time of the last confirmed heartbeat
	stopping  bool        // Unlock waits for the heartbeats in flight
	broken    error       // why the connection cannot be handed back

	once sync.Once
	err  error // Unlock's outcome, set once
}

// Lock waits until the connection's session holds the session-level advisory
// lock of [Key](subject), and returns the lease of that lock. It is
// Config{}.Lock.
func Lock(ctx context.Context, conn *pgx.Conn, subject string) (*Lease, error) {
	return Config{}.Lock(ctx, conn, subject)
}

// Lock waits until the connection's session holds the session-level advisory
// lock of [Key](subject), with pg_advisory_lock, and returns the lease of
// that lock. The signal's subject is subject.
//
// ctx bounds the wait only, for the lock and for the fencing token's row
// (see [Lease.Token]); the lease lasts until it is lost or released. A
// wait cut by ctx is cancelled on the server (a cancel request), so no
// waiter is left there; if the server does not answer the cancel within
// Deadline, Lock closes conn, and the server drops the waiter when it sees
// the connection gone (Lock sets client_connection_check_interval to
// Heartbeat for that). conn must not be in a transaction.
//
// When another lease of this process holds the same lock (same server,
// database and key), Lock does not return before that lease is lost or
// released, even when the server has already granted the lock.
//
// Lock sets the session's idle_session_timeout, tcp_user_timeout,
// tcp_keepalives_idle, tcp_keepalives_interval, tcp_keepalives_count and
// client_connection_check_interval (see [Config]); Unlock puts them back.
// If Lock returns an error, conn is usable unless it was closed.
func (c Config) Lock(ctx context.Context, conn *pgx.Conn, subject string) (*Lease, error) {
	if ctx == nil {
		panic("pglease: Lock called with a nil context")
	}
	if conn == nil {
		panic("pglease: Lock called with a nil conn")
	}
	fail := func(err error) (*Lease, error) { return nil, fmt.Errorf("pglease: lock %q: %w", subject, err) }
	c, err := c.withDefaults()
	if err != nil {
		return fail(err)
	}
	pc := conn.PgConn()
	if pc.IsClosed() {
		return fail(errors.New("the connection is closed"))
	}
	if st := pc.TxStatus(); st != 'I' {
		return fail(fmt.Errorf("the connection is in a transaction (status %q)", st))
	}
	key := Key(subject)
	saved, id, err := prepare(ctx, conn, c, key)
	if err != nil {
		return fail(err)
	}
	held, err := wait(ctx, pc, key, c.Deadline)
	if err != nil {
		giveBack(conn, key, held, saved, c.Deadline)
		return fail(err)
	}
	unclaim, err := claim(ctx, id)
	if err != nil {
		giveBack(conn, key, true, saved, c.Deadline)
		return fail(fmt.Errorf("the wait was cut by its context while another lease of this process held the lock: %w", err))
	}
	token, err := fence(ctx, conn, c.Fence, key)
	if err != nil {
		unclaim()
		giveBack(conn, key, true, saved, c.Deadline)
		return fail(err)
	}
	// The first confirmation: the server answered a statement sent at sent
	// while the session held the lock, and any silence it counts starts
	// after it received that statement.
	sent := time.Now()
	if err := confirm(conn, c.Deadline); err != nil {
		unclaim()
		giveBack(conn, key, true, saved, c.Deadline)
		return fail(err)
	}
	l := &Lease{
		ctrl:      controller.New(subject),
		conn:      conn,
		nc:        pc.Conn(),
		cfg:       c,
		key:       key,
		token:     token,
		saved:     saved,
		unclaim:   unclaim,
		quit:      make(chan struct{}),
		kept:      make(chan struct{}),
		read:      make(chan struct{}),
		confirmed: sent,
	}
	go l.keep()
	go l.follow()
	return l, nil
}

// settings are the session settings Lock sets, in this order.
var settings = []string{
	"idle_session_timeout",
	"tcp_user_timeout",
	"tcp_keepalives_idle",
	"tcp_keepalives_interval",
	"tcp_keepalives_count",
	"client_connection_check_interval",
}

// values returns the settings Lock makes for c, in the order of settings.
func (c Config) values() []string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
	idle := (c.ServerTimeout + time.Second - 1) / time.Second // whole seconds, rounded up
	return []string{ms(c.ServerTimeout), ms(c.ServerTimeout), fmt.Sprintf("%ds", idle), "1s", "1", ms(c.Heartbeat)}
}

// setSQL is the statement that sets settings to $1, $2, ...; its first
// column is $n+1 when withUnlock, the result of pg_advisory_unlock($n+1).
func setSQL(withUnlock bool) string {
	cols := make([]string, 0, len(settings)+1)
	if withUnlock {
		cols = append(cols, fmt.Sprintf("pg_advisory_unlock($%d::bigint)", len(settings)+1))
	}
	for i, name := range settings {
		cols = append(cols, fmt.Sprintf("set_config('%s', $%d, false)", name, i+1))
	}
	return "select " + strings.Join(cols, ", ")
}

// prepare reads the session settings Lock changes, sets them, checks that the
// server now drops a silent session no sooner than c.Deadline after it last
// heard from it, and returns the old settings and the lock's id.
func prepare(ctx context.Context, conn *pgx.Conn, c Config, key int64) ([]string, lockID, error) {
	saved := make([]string, len(settings))
	dest := make([]any, 0, len(settings)+2)
	for i := range saved {
		dest = append(dest, &saved[i])
	}
	id := lockID{key: key}
	var standby bool
	dest = append(dest, &id.system, &id.db, &standby)
	cols := make([]string, 0, len(settings)+3)
	for _, name := range settings {
		cols = append(cols, fmt.Sprintf("current_setting('%s')", name))
	}
	cols = append(cols, "(select system_identifier::text from pg_control_system())",
		"(select oid from pg_database where datname = current_database())", "pg_is_in_recovery()")
	if err := conn.QueryRow(ctx, "select "+strings.Join(cols, ", ")).Scan(dest...); err != nil {
		return nil, id, fmt.Errorf("read the session's settings: %w", err)
	}
	if standby {
		// A standby grants advisory locks of its own, which know nothing
		// of the primary's: a lease there could overlap one on the primary.
		return nil, id, ErrStandby
	}
	args := make([]any, 0, len(settings))
	for _, v := range c.values() {
		args = append(args, v)
	}
	if _, err := conn.Exec(ctx, setSQL(false), args...); err != nil {
		return nil, id, fmt.Errorf("set the session's timeouts: %w", err)
	}
	bound, err := silentDrop(ctx, conn)
	if err != nil {
		restore(ctx, conn, saved)
		return nil, id, err
	}
	if bound <= c.Deadline {
		restore(ctx, conn, saved)
		return nil, id, fmt.Errorf("the server may drop a silent session after %v, not after the deadline %v", bound, c.Deadline)
	}
	return saved, id, nil
}

// silentDrop returns the earliest time after it last heard from the client
// at which the server may end the session without telling it, as the
// session's settings now say: the smallest of idle_session_timeout,
// tcp_user_timeout and tcp_keepalives_idle + tcp_keepalives_interval ×
// tcp_keepalives_count, among those that apply (the tcp_ settings read 0 on
// a Unix-domain socket).
func silentDrop(ctx context.Context, conn *pgx.Conn) (time.Duration, error) {
	rows, err := conn.Query(ctx, "select name, setting::bigint from pg_settings where name = any($1)", settings[:5])
	if err != nil {
		return 0, fmt.Errorf("read the session's timeouts: %w", err)
	}
	v := make(map[string]int64) // milliseconds, or seconds for the keepalives, or a count
	var name string
	var setting int64
	_, err = pgx.ForEachRow(rows, []any{&name, &setting}, func() error { v[name] = setting; return nil })
	if err != nil {
		return 0, fmt.Errorf("read the session's timeouts: %w", err)
	}
	bound := time.Duration(1<<63 - 1)
	for _, ms := range []int64{v["idle_session_timeout"], v["tcp_user_timeout"]} {
		if ms > 0 {
			bound = min(bound, time.Duration(ms)*time.Millisecond)
		}
	}
	if idle, interval, count := v["tcp_keepalives_idle"], v["tcp_keepalives_interval"], v["tcp_keepalives_count"]; idle > 0 && interval > 0 && count > 0 {
		bound = min(bound, time.Duration(idle+interval*count)*time.Second)
	}
	return bound, nil
}

// wait takes the advisory lock of key with pg_advisory_lock, in one simple
// query, and returns once the session holds it or the wait is over. held
// reports whether the session holds the lock; it may with an error, when the
// grant came before ctx's cancellation reached the server.
//
// When ctx ends, wait sends the server a cancel request, again every
// resend until the query returns, and closes the connection if it has not
// returned within grace: the server then drops the waiter when it sees the
// connection gone. No statement follows before every cancel request was
// acknowledged, so none can cancel a later statement.
func wait(ctx context.Context, pc *pgconn.PgConn, key int64, grace time.Duration) (held bool, err error) {
	const resend = 100 * time.Millisecond
	returned := make(chan struct{})
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		giveUp := time.NewTimer(grace)
		defer giveUp.Stop()
		cctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		for {
			if err := pc.CancelRequest(cctx); err != nil {
				pc.Conn().SetDeadline(time.Unix(1, 0))
				return
			}
			again := time.NewTimer(resend)
			select {
			case <-returned:
				again.Stop()
				return
			case <-giveUp.C:
				again.Stop()
				pc.Conn().SetDeadline(time.Unix(1, 0))
				return
			case <-again.C:
			}
		}
	})
	_, err = pc.Exec(context.Background(), fmt.Sprintf("select pg_advisory_lock(%d)", key)).ReadAll()
	close(returned)
	if stop() {
		return err == nil, err
	}
	<-cancelled
	if err == nil {
		if !pc.IsClosed() {
			pc.Conn().SetDeadline(time.Time{})
		}
		return true, fmt.Errorf("granted as the wait was cut by its context: %w", context.Cause(ctx))
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" { // query_canceled
		return false, fmt.Errorf("the wait was cut by its context: %w", context.Cause(ctx))
	}
	return false, fmt.Errorf("the wait was cut by its context (%w) and the server did not answer the cancel: %w", context.Cause(ctx), err)
}

// confirm makes the session answer a statement while it holds the lock,
// within timeout.
func confirm(conn *pgx.Conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "select 1"); err != nil {
		return fmt.Errorf("the session did not answer after the grant: %w", err)
	}
	return nil
}

// fence takes the fencing token of key in table, if table is not nil. It
// waits, bounded by ctx, for the transactions of writes that locked the
// key's row, as the wait for the grant does for the lock.
func fence(ctx context.Context, conn *pgx.Conn, table pgx.Identifier, key int64) (token int64, err error) {
	if table == nil {
		return 0, nil
	}
	t := table.Sanitize()
	err = conn.QueryRow(ctx, "insert into "+t+" as t (key, token) values ($1, 1) "+
		"on conflict (key) do update set token = t.token + 1 returning token", key).Scan(&token)
	if err != nil {
		err = fmt.Errorf("take the fencing token in %s: %w", t, err)
	}
	return token, err
}

// giveBack releases the lock if held and puts the session's settings back,
// within timeout; a connection that fails is closed, which ends the session
// and its lock.
func giveBack(conn *pgx.Conn, key int64, held bool, saved []string, timeout time.Duration) {
	if conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if held {
		if _, err := conn.Exec(ctx, "select pg_advisory_unlock($1::bigint)", key); err != nil {
			conn.PgConn().Close(ctx)
			return
		}
	}
	restore(ctx, conn, saved)
}

// restore puts the session's settings back, and closes the connection if it
// cannot.
func restore(ctx context.Context, conn *pgx.Conn, saved []string) {
	args := make([]any, 0, len(saved))
	for _, v := range saved {
		args = append(args, v)
	}
	if _, err := conn.Exec(ctx, setSQL(false), args...); err != nil {
		conn.PgConn().Close(ctx)
	}
}

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (l *Lease) Signal() *signal.Signal { return l.ctrl.Signal() }

// Key returns the advisory lock key, [Key] of the subject.
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
// server or the connection reports afterwards loses it; it stops the
// heartbeats and the pending read, and waits, bounded by ctx, for the
// replies to the heartbeats in flight; then it releases the lock with
// pg_advisory_unlock, puts the session's settings back, and hands conn back
// usable.
//
// A lease lost before Unlock stays lost; its connection was closed at the
// loss, and Unlock returns an error wrapping the loss. If ctx ends before
// the heartbeats in flight are answered, or the release fails, Unlock closes
// conn, which ends the session and frees the lock, and returns the error.
// Successive calls return the first call's result.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("pglease: Unlock called with a nil context")
	}
	l.once.Do(func() {
		if err := l.release(ctx); err != nil {
			l.err = fmt.Errorf("pglease: unlock %q: %w", l.ctrl.Subject(), err)
		}
	})
	return l.err
}

func (l *Lease) release(ctx context.Context) error {
	ended := l.ctrl.End()
	l.unclaim()
	l.quitOnce.Do(func() { close(l.quit) })
	<-l.kept
	l.mu.Lock()
	l.stopping = true
	inFlight := len(l.sent)
	l.mu.Unlock()
	if inFlight == 0 {
		l.nc.SetReadDeadline(time.Unix(1, 0))
	}
	select {
	case <-l.read:
	case <-ctx.Done():
		l.nc.SetReadDeadline(time.Unix(1, 0))
		<-l.read
	}
	if !ended {
		return fmt.Errorf("the lease was lost before: %w", l.ctrl.Signal().Err())
	}
	l.mu.Lock()
	broken := l.broken
	l.mu.Unlock()
	pc := l.conn.PgConn()
	if broken != nil {
		pc.Close(ctx)
		return fmt.Errorf("connection closed: %w", broken)
	}
	l.nc.SetDeadline(time.Time{})
	args := make([]any, 0, len(l.saved)+1)
	for _, v := range l.saved {
		args = append(args, v)
	}
	args = append(args, l.key)
	var unlocked bool
	dest := make([]any, len(settings)+1)
	dest[0] = &unlocked
	for i := range settings {
		dest[i+1] = new(string)
	}
	if err := l.conn.QueryRow(ctx, setSQL(true), args...).Scan(dest...); err != nil {
		pc.Close(ctx)
		return fmt.Errorf("release the lock: %w", err)
	}
	if !unlocked {
		return errors.New("release the lock: the session did not hold it")
	}
	return nil
}
