package pglease

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease"
)

// A session is the lease's own connection. Every statement on it is a
// simple query whose last column is pg_backend_pid(), which must be the
// session's server process every time; once Lock has marked the session,
// every statement is gated on the mark (see ours), and does nothing in any
// other session. Every name in the SQL is schema-qualified, operators among
// them, so that no search_path can put another function, view or operator
// in place of the server's.
type session struct {
	conn    *pgx.Conn
	pc      *pgconn.PgConn
	grace   time.Duration // how long a cancel or a clean-up may take
	backend uint32        // pg_backend_pid(), once check has read it
	marker  string        // the session's mark, once set has made it
}

func newSession(conn *pgx.Conn, grace time.Duration) *session {
	return &session{conn: conn, pc: conn.PgConn(), grace: grace}
}

// markName is the custom setting that marks the lease's session: a value
// set for the session lasts as long as it does, and no other session
// reads it.
const markName = "pglease.session"

// newMarker returns a random mark, 128 bits in hex.
func newMarker() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ours returns the SQL condition that the statement runs in the lease's
// session: its server process, and, once set, its mark. A statement gated
// on it (select ... where ours) returns no row, and runs none of its
// functions, in any other session: PostgreSQL checks a select's condition
// that reads no table before it computes the select list.
func (s *session) ours() string {
	cond := fmt.Sprintf("pg_catalog.pg_backend_pid() operator(pg_catalog.=) %d", s.backend)
	if s.marker != "" {
		cond += fmt.Sprintf(" and pg_catalog.current_setting('%s', true) operator(pg_catalog.=) '%s'", markName, s.marker)
	}
	return cond
}

// errElsewhere is the error of a gated statement that returned no row.
var errElsewhere = fmt.Errorf("%w: a statement reached a server session that is not the lease's (another server process, or one without the lease's mark), and did nothing there", ErrPooled)

// settings are the session settings Lock sets, in this order, the first
// five of them the ones that bound the server's drop of a silent session.
var settings = []string{
	"idle_session_timeout",
	"tcp_user_timeout",
	"tcp_keepalives_idle",
	"tcp_keepalives_interval",
	"tcp_keepalives_count",
	"client_connection_check_interval",
	"statement_timeout",
	"lock_timeout",
}

// lockedSQL is the condition that the session holds key's advisory lock,
// as pg_locks shows a bigint key: its high half in classid, its low half
// in objid, and objsubid 1.
func lockedSQL(key int64) string {
	u := uint64(key)
	return fmt.Sprintf("exists (select from pg_catalog.pg_locks where locktype operator(pg_catalog.=) 'advisory' "+
		"and pid operator(pg_catalog.=) pg_catalog.pg_backend_pid() and granted "+
		"and classid operator(pg_catalog.=) '%d'::pg_catalog.oid and objid operator(pg_catalog.=) '%d'::pg_catalog.oid "+
		"and objsubid operator(pg_catalog.=) 1)", u>>32, u&0xffffffff)
}

// check reads the session's server process and the lock's id before it
// changes anything, and refuses a pooler (unless c.SessionPooler), a
// standby, and a session that already holds the lock. pooled reports a
// connection through a pooler that SessionPooler lets through.
func (s *session) check(ctx context.Context, c Config, key int64) (id lockID, pooled bool, err error) {
	id = lockID{key: key}
	row, err := s.query(ctx, "select (select system_identifier::pg_catalog.text from pg_catalog.pg_control_system()), "+
		"(select oid from pg_catalog.pg_database where datname operator(pg_catalog.=) pg_catalog.current_database()), "+
		"pg_catalog.pg_is_in_recovery(), "+lockedSQL(key)+", pg_catalog.pg_backend_pid()")
	if err != nil {
		return id, false, fmt.Errorf("read the session: %w", err)
	}
	startup, backend := s.pc.PID(), pid(row[4])
	if backend != startup && !c.SessionPooler {
		// Every pooler answers the startup with a process id of its own.
		return id, false, fmt.Errorf("%w: the connection reported server process %d at startup, and pg_backend_pid() is %d: "+
			"a pooler stands between it and the server, and in transaction or statement mode it shares sessions and their locks; "+
			"connect directly, or through a pooler in session mode with Config.SessionPooler set", ErrPooled, startup, backend)
	}
	s.backend = backend
	if string(row[2]) == "t" {
		// A standby grants advisory locks of its own, which know nothing
		// of the primary's: a lease there could overlap one on the primary.
		return id, false, ErrStandby
	}
	if string(row[3]) == "t" {
		return id, false, errors.New("the session already holds the lock, taken by other code on this connection of the pool; advisory locks are re-entrant, so a lease on it would share the lock")
	}
	id.system = string(row[0])
	var db uint64
	if _, err := fmt.Sscan(string(row[1]), &db); err != nil {
		return id, false, fmt.Errorf("read the database's oid %s: %w", quote(string(row[1])), err)
	}
	id.db = uint32(db)
	return id, backend != startup, nil
}

// set sets the session's settings for c and marks the session, and checks
// that the server now drops a silent session no sooner than c.Deadline
// after it last heard from it.
func (s *session) set(ctx context.Context, c Config, shared bool) error {
	marker := newMarker()
	cols := make([]string, 0, len(settings)+2)
	for i, v := range c.values(shared) {
		cols = append(cols, fmt.Sprintf("pg_catalog.set_config('%s', '%s', false)", settings[i], v))
	}
	cols = append(cols, fmt.Sprintf("pg_catalog.set_config('%s', '%s', false)", markName, marker))
	if _, err := s.query(ctx, "select "+strings.Join(cols, ", ")+", pg_catalog.pg_backend_pid() where "+s.ours()); err != nil {
		return fmt.Errorf("set the session's timeouts: %w", err)
	}
	s.marker = marker
	bound, err := s.silentDrop(ctx)
	if err != nil {
		return err
	}
	if bound <= c.Deadline {
		return fmt.Errorf("the server may drop a silent session after %v, not after the deadline %v", bound, c.Deadline)
	}
	return nil
}

// silentDrop returns the earliest time after it last heard from the client
// at which the server may end the session without telling it, as the
// session's settings now say: the smallest of idle_session_timeout,
// tcp_user_timeout and tcp_keepalives_idle + tcp_keepalives_interval ×
// tcp_keepalives_count, among those that apply (the tcp_ settings read 0 on
// a Unix-domain socket).
func (s *session) silentDrop(ctx context.Context) (time.Duration, error) {
	cols := make([]string, 0, 6)
	for _, name := range settings[:5] {
		cols = append(cols, fmt.Sprintf("(select setting from pg_catalog.pg_settings where name operator(pg_catalog.=) '%s')", name))
	}
	row, err := s.query(ctx, "select "+strings.Join(cols, ", ")+", pg_catalog.pg_backend_pid() where "+s.ours())
	if err != nil {
		return 0, fmt.Errorf("read the session's timeouts: %w", err)
	}
	v := make([]int64, 5) // milliseconds, or seconds for the keepalives, or a count
	for i := range v {
		if _, err := fmt.Sscan(string(row[i]), &v[i]); err != nil {
			return 0, fmt.Errorf("read the session's %s %s: %w", settings[i], quote(string(row[i])), err)
		}
	}
	bound := time.Duration(1<<63 - 1)
	for _, ms := range v[:2] {
		if ms > 0 {
			bound = min(bound, time.Duration(ms)*time.Millisecond)
		}
	}
	if idle, interval, count := v[2], v[3], v[4]; idle > 0 && interval > 0 && count > 0 {
		bound = min(bound, time.Duration(idle+interval*count)*time.Second)
	}
	return bound, nil
}

// probeRounds is how many times [session.probe] sends a statement on the
// session and then one on the second connection, each round after a pause
// of a random length up to probePause. Two Locks that probe a sharing
// pooler at once can fall into step, each second connection reaching the
// other's session (A's session, B's, then A's second connection, given B's
// server connection last in first out, and B's given A's): with 4 rounds
// and no pause, 2 Locks in 2,000 through PgBouncer in transaction mode
// passed the probe that way, on 2 cores, one kept busy by another job. The
// pauses break the step; 16 rounds make a pass by chance as rare as a
// pattern repeated 16 times in a row.
const (
	probeRounds = 16
	probePause  = 500 * time.Microsecond
)

// probeSQL is what the second connection of probe asks.
const probeSQL = "select pg_catalog.pg_backend_pid(), pg_catalog.current_setting('" + markName + "', true)"

// probe checks that the pooler the session goes through does not share it:
// it opens a second connection with pool's configuration and, probeRounds
// times, after a random pause, sends a statement on the session, which gives its server
// connection back to a pooler in transaction or statement mode, then one
// on the second connection, which such a pooler may hand the server
// connection just given back (PgBouncer reuses them last in first out, or
// in turn). In a pooler that keeps sessions apart the second connection
// has a server process of its own, the same in each round, which no
// session of a lease has marked (a server connection reused after another
// client's is reset, its mark with it); anything else is sharing. Lock
// probes before it sets or marks anything in the session, which a sharing
// pooler would hand to its other clients. It waits no longer than s.grace,
// the statements on the session included.
func (s *session) probe(ctx context.Context, pool *pgxpool.Pool) error {
	pctx, cancel := context.WithTimeout(ctx, s.grace)
	defer cancel()
	fail := func(err error) error {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("check that the pooler does not share the session: cut by its context: %w: %w", context.Cause(ctx), err)
		case pctx.Err() != nil:
			return fmt.Errorf("check that the pooler does not share the session: not done within %v: %w", s.grace, err)
		}
		return fmt.Errorf("check that the pooler does not share the session: %w", err)
	}
	shared := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format+": the pooler hands a server session to several clients (transaction or statement mode), "+
			"and Config.SessionPooler is only for a pooler in session mode", append([]any{ErrPooled}, args...)...)
	}
	pcfg := pool.Config()
	cc := pcfg.ConnConfig
	if pcfg.BeforeConnect != nil {
		if err := pcfg.BeforeConnect(pctx, cc); err != nil {
			return fail(err)
		}
	}
	other, err := pgx.ConnectConfig(pctx, cc)
	if err != nil {
		return fail(fmt.Errorf("open a second connection through the pooler: %w", err))
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		other.Close(cctx)
	}()
	var first uint32 // the second connection's server process
	for range probeRounds {
		pause := time.NewTimer(rand.N(probePause))
		select {
		case <-pctx.Done():
			pause.Stop()
			return fail(context.Cause(pctx))
		case <-pause.C:
		}
		if _, err := s.query(pctx, "select pg_catalog.pg_backend_pid() where "+s.ours()); err != nil {
			return fail(err)
		}
		results, err := other.PgConn().Exec(pctx, probeSQL).ReadAll()
		if err == nil && (len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 2) {
			err = errors.New("the second connection's statement did not return one row")
		}
		if err != nil {
			return fail(fmt.Errorf("the second connection's statement, within %v: %w", s.grace, err))
		}
		row := results[0].Rows[0]
		p := pid(row[0])
		switch {
		case p == s.backend:
			return shared("another client connection of the pooler reached the session's server process %d", p)
		case len(row[1]) != 0:
			return shared("another client connection of the pooler reached server process %d, which a session of a lease marked", p)
		case first != 0 && p != first:
			return shared("the statements of another client connection of the pooler reached server processes %d and %d", first, p)
		}
		first = p
	}
	return nil
}

// wait takes the advisory lock of key with pg_advisory_lock and returns
// once the session holds it or the wait is over. held reports whether the
// session may hold the lock: with an error, when the grant came before
// ctx's cancellation reached the server, or when the connection failed.
func (s *session) wait(ctx context.Context, key int64) (held bool, err error) {
	_, err = s.query(ctx, fmt.Sprintf(lockSQL, key, s.ours()))
	if err == nil {
		return true, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || errors.Is(err, errElsewhere) {
		// The server refused or cancelled the statement, or it ran in
		// another session, where its condition kept it from locking: no
		// grant.
		return false, fmt.Errorf("wait for the lock: %w", err)
	}
	// A grant as ctx ended, or a failed connection: the session may hold
	// the lock.
	return true, fmt.Errorf("wait for the lock: %w", err)
}

// try takes the advisory lock of key with pg_try_advisory_lock, which
// never waits nor leaves a waiter: a lock held by another session fails
// with an error wrapping [lease.ErrHeld]. held reports whether the session
// may hold the lock, as for wait.
func (s *session) try(ctx context.Context, key int64) (held bool, err error) {
	row, err := s.query(ctx, fmt.Sprintf(tryLockSQL, key, s.ours()))
	switch {
	case err == nil && string(row[0]) == "t":
		return true, nil
	case err == nil:
		return false, fmt.Errorf("%w: another session holds the lock", lease.ErrHeld)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || errors.Is(err, errElsewhere) {
		return false, fmt.Errorf("try the lock: %w", err)
	}
	// A statement that completed as ctx ended says whether it took the
	// lock; a failed connection does not.
	return row == nil || string(row[0]) == "t", fmt.Errorf("try the lock: %w", err)
}

// tryLockSQL is the statement that takes the lock of a key (%d) if it is
// free, gated on the session (%s).
const tryLockSQL = "select pg_catalog.pg_try_advisory_lock(%d), pg_catalog.pg_backend_pid() where %s"

// lockSQL is the statement that waits for the lock of a key (%d), gated on
// the session (%s). A test puts another in its place to check that Lock
// does not trust it (see export_test.go).
var lockSQL = "select pg_catalog.pg_advisory_lock(%d), pg_catalog.pg_backend_pid() where %s"

// fence takes the fencing token of key in table, if table is not nil. It
// waits, bounded by ctx, for the transactions of writes that locked the
// key's row, as the wait for the grant does for the lock.
func (s *session) fence(ctx context.Context, table pgx.Identifier, key int64) (token int64, err error) {
	if table == nil {
		return 0, nil
	}
	t := table.Sanitize()
	row, err := s.query(ctx, fmt.Sprintf("insert into %s as t (key, token) select %d, 1 where %s "+
		"on conflict (key) do update set token = t.token operator(pg_catalog.+) 1 returning token, pg_catalog.pg_backend_pid()",
		t, key, s.ours()))
	if err == nil {
		_, err = fmt.Sscan(string(row[0]), &token)
	}
	if err != nil {
		err = fmt.Errorf("take the fencing token in %s: %w", quote(t), err)
	}
	return token, err
}

// confirm makes the session answer a statement while it holds the lock,
// within timeout, and checks in pg_locks that the server granted the lock
// to the session: Lock never hands out a lease on the word of a statement
// alone.
func (s *session) confirm(key int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	row, err := s.query(ctx, "select "+lockedSQL(key)+", pg_catalog.pg_backend_pid() where "+s.ours())
	if err != nil {
		return fmt.Errorf("the session did not answer after the grant: %w", err)
	}
	if string(row[0]) != "t" {
		return fmt.Errorf("%w: pg_advisory_lock returned, and pg_locks shows no lock of key %d granted to the session's server process %d",
			ErrNotGranted, key, s.backend)
	}
	return nil
}

// query runs sql, a simple query whose last column is pg_backend_pid() and
// that returns one row, and returns that row. The row's process must be the
// session's, once check has read it.
//
// When ctx ends, query sends the server a cancel request, again every
// resend until the statement returns, and closes the connection if it has
// not returned within s.grace. No statement follows before every cancel
// request was acknowledged, so none can cancel a later statement. A
// statement that completed as ctx ended returns its row and an error
// wrapping ctx's cause.
func (s *session) query(ctx context.Context, sql string) (row [][]byte, err error) {
	const resend = 100 * time.Millisecond
	pc := s.pc
	returned := make(chan struct{})
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		giveUp := time.NewTimer(s.grace)
		defer giveUp.Stop()
		cctx, cancel := context.WithTimeout(context.Background(), s.grace)
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
	results, err := pc.Exec(context.Background(), sql).ReadAll()
	close(returned)
	if err == nil {
		switch {
		case len(results) == 1 && len(results[0].Rows) == 0 && s.backend != 0:
			err = errElsewhere
		case len(results) != 1 || len(results[0].Rows) != 1:
			err = fmt.Errorf("a statement returned %d results, want one row", len(results))
		case s.backend != 0 && pid(results[0].Rows[0][len(results[0].Rows[0])-1]) != s.backend:
			err = fmt.Errorf("%w: a statement was answered by server process %s, the session's is %d",
				ErrPooled, results[0].Rows[0][len(results[0].Rows[0])-1], s.backend)
		default:
			row = results[0].Rows[0]
		}
	}
	if stop() {
		return row, err
	}
	<-cancelled
	if err == nil {
		if !pc.IsClosed() {
			pc.Conn().SetDeadline(time.Time{})
		}
		return row, fmt.Errorf("completed as it was cut by its context: %w", context.Cause(ctx))
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" { // query_canceled
		return nil, fmt.Errorf("cut by its context: %w: %w", context.Cause(ctx), err)
	}
	return row, fmt.Errorf("cut by its context (%w), and the server did not answer the cancel: %w", context.Cause(ctx), err)
}

// unlockSQL is the statement that releases the lock of a key (%d), gated
// on the session (%s).
const unlockSQL = "select pg_catalog.pg_advisory_unlock(%d), pg_catalog.pg_backend_pid() where %s"

// abandon gives up a session that will hold no lease: it releases the lock
// if the session may hold it, within s.grace, then closes the connection,
// which ends the session and frees whatever it still holds.
func (s *session) abandon(key int64, held bool) {
	if held && !s.pc.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), s.grace)
		s.query(ctx, fmt.Sprintf(unlockSQL, key, s.ours()))
		cancel()
	}
	s.close()
}

// close closes the connection, within closeTimeout. Successive calls do
// nothing.
func (s *session) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	s.conn.Close(ctx)
}
