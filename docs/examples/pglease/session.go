package pglease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A session is the lease's own connection. Every statement on it is a
// simple query that also returns pg_backend_pid(), which must be the
// session's server process every time.
type session struct {
	conn    *pgx.Conn
	pc      *pgconn.PgConn
	grace   time.Duration // how long a cancel or a clean-up may take
	backend uint32        // pg_backend_pid(), once check has read it
}

func newSession(conn *pgx.Conn, grace time.Duration) *session {
	return &session{conn: conn, pc: conn.PgConn(), grace: grace}
}

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

// values returns the settings Lock makes for c, in the order of settings.
func (c Config) values() []string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
	idle := (c.ServerTimeout + time.Second - 1) / time.Second // whole seconds, rounded up
	return []string{ms(c.ServerTimeout), ms(c.ServerTimeout), fmt.Sprintf("%ds", idle), "1s", "1", ms(c.Heartbeat), "0", "0"}
}

// lockedSQL is the condition that the session holds key's advisory lock,
// as pg_locks shows a bigint key: its high half in classid, its low half
// in objid, and objsubid 1.
func lockedSQL(key int64) string {
	u := uint64(key)
	return fmt.Sprintf("exists (select from pg_locks where locktype = 'advisory' and pid = pg_backend_pid() "+
		"and granted and classid = %d and objid = %d and objsubid = 1)", u>>32, u&0xffffffff)
}

// check reads the session's server process and the lock's id before it
// changes anything, and refuses a pooler (unless c.SessionPooler), a
// standby, and a session that already holds the lock.
func (s *session) check(ctx context.Context, c Config, key int64) (lockID, error) {
	id := lockID{key: key}
	row, err := s.query(ctx, "select (select system_identifier::text from pg_control_system()), "+
		"(select oid from pg_database where datname = current_database()), pg_is_in_recovery(), "+lockedSQL(key)+", pg_backend_pid()")
	if err != nil {
		return id, fmt.Errorf("read the session: %w", err)
	}
	if startup, backend := s.pc.PID(), pid(row[4]); backend != startup && !c.SessionPooler {
		// Every pooler answers the startup with a process id of its own.
		return id, fmt.Errorf("%w: the connection reported server process %d at startup, and pg_backend_pid() is %d: "+
			"a pooler stands between it and the server, and in transaction or statement mode it shares sessions and their locks; "+
			"connect directly, or through a pooler in session mode with Config.SessionPooler set", ErrPooled, startup, backend)
	}
	s.backend = pid(row[4])
	if string(row[2]) == "t" {
		// A standby grants advisory locks of its own, which know nothing
		// of the primary's: a lease there could overlap one on the primary.
		return id, ErrStandby
	}
	if string(row[3]) == "t" {
		return id, errors.New("the session already holds the lock, taken by other code on this connection of the pool; advisory locks are re-entrant, so a lease on it would share the lock")
	}
	id.system = string(row[0])
	var db uint64
	if _, err := fmt.Sscan(string(row[1]), &db); err != nil {
		return id, fmt.Errorf("read the database's oid %q: %w", row[1], err)
	}
	id.db = uint32(db)
	return id, nil
}

// set sets the session's settings for c, and checks that the server now
// drops a silent session no sooner than c.Deadline after it last heard from
// it.
func (s *session) set(ctx context.Context, c Config) error {
	cols := make([]string, 0, len(settings)+1)
	for i, v := range c.values() {
		cols = append(cols, fmt.Sprintf("set_config('%s', '%s', false)", settings[i], v))
	}
	if _, err := s.query(ctx, "select "+strings.Join(cols, ", ")+", pg_backend_pid()"); err != nil {
		return fmt.Errorf("set the session's timeouts: %w", err)
	}
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
		cols = append(cols, fmt.Sprintf("(select setting from pg_settings where name = '%s')", name))
	}
	row, err := s.query(ctx, "select "+strings.Join(cols, ", ")+", pg_backend_pid()")
	if err != nil {
		return 0, fmt.Errorf("read the session's timeouts: %w", err)
	}
	v := make([]int64, 5) // milliseconds, or seconds for the keepalives, or a count
	for i := range v {
		if _, err := fmt.Sscan(string(row[i]), &v[i]); err != nil {
			return 0, fmt.Errorf("read the session's %s %q: %w", settings[i], row[i], err)
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

// wait takes the advisory lock of key with pg_advisory_lock and returns
// once the session holds it or the wait is over. held reports whether the
// session may hold the lock: with an error, when the grant came before
// ctx's cancellation reached the server, or when the connection failed.
func (s *session) wait(ctx context.Context, key int64) (held bool, err error) {
	_, err = s.query(ctx, fmt.Sprintf("select pg_advisory_lock(%d), pg_backend_pid()", key))
	if err == nil {
		return true, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server refused or cancelled the statement: no grant.
		return false, fmt.Errorf("wait for the lock: %w", err)
	}
	// A grant as ctx ended, another server process, or a failed
	// connection: the session may hold the lock.
	return true, fmt.Errorf("wait for the lock: %w", err)
}

// fence takes the fencing token of key in table, if table is not nil. It
// waits, bounded by ctx, for the transactions of writes that locked the
// key's row, as the wait for the grant does for the lock.
func (s *session) fence(ctx context.Context, table pgx.Identifier, key int64) (token int64, err error) {
	if table == nil {
		return 0, nil
	}
	t := table.Sanitize()
	row, err := s.query(ctx, fmt.Sprintf("insert into %s as t (key, token) values (%d, 1) "+
		"on conflict (key) do update set token = t.token + 1 returning token, pg_backend_pid()", t, key))
	if err == nil {
		_, err = fmt.Sscan(string(row[0]), &token)
	}
	if err != nil {
		err = fmt.Errorf("take the fencing token in %s: %w", t, err)
	}
	return token, err
}

// confirm makes the session answer a statement while it holds the lock,
// within timeout.
func (s *session) confirm(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := s.query(ctx, "select pg_backend_pid()"); err != nil {
		return fmt.Errorf("the session did not answer after the grant: %w", err)
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
		case len(results) != 1 || len(results[0].Rows) != 1:
			err = fmt.Errorf("%q returned %d results, want one row", sql, len(results))
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

// abandon gives up a session that will hold no lease: it releases the lock
// if the session may hold it, within s.grace, then closes the connection,
// which ends the session and frees whatever it still holds.
func (s *session) abandon(key int64, held bool) {
	if held && !s.pc.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), s.grace)
		s.query(ctx, fmt.Sprintf("select pg_advisory_unlock(%d), pg_backend_pid()", key))
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
