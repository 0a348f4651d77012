package mysqllease

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// A session is a server session of the issuer: a connection taken out of
// the pool with db.Conn and never given back, since its timeouts and locks
// must not reach the pool's other users; a shared session's (see shared),
// or a waiting Lock's until the grant makes it one. Every statement on it
// is a text-protocol query (no arguments, so no prepared statement and no
// setting of the DSN changes it) whose last two columns are
// CONNECTION_ID() and the session's mark, both checked: a statement
// answered by any other server session is an error wrapping ErrPooled.
type session struct {
	db      *sql.DB
	conn    *sql.Conn
	id      int64         // CONNECTION_ID(), read by check
	mark    string        // the session's mark, a user variable set by probe
	mariadb bool          // VERSION() says MariaDB
	server  string        // @@hostname:@@port/@@server_id
	grace   time.Duration // how long the KILL of a failed Lock may take
	bound   time.Duration // how long the probe waits for a second connection
}

// markVar is the user variable that marks the lease's session: a user
// variable lives as long as its session, and no other session reads it.
const markVar = "@mysqllease_mark"

// tail is the end of every statement's select list.
const tail = ", CONNECTION_ID(), " + markVar

// serverSQL names the server a session is on: its host name, port and
// server_id.
const serverSQL = "CONCAT(@@hostname, ':', @@port, '/', @@server_id)"

// errElsewhere is the error of a statement answered by another session.
var errElsewhere = fmt.Errorf("%w: a statement was answered by another server session than the lease's, or by one without its mark", ErrPooled)

// row runs query, whose select list ends with tail, on the session, scans
// its first columns into dest and checks the last two.
func (s *session) row(ctx context.Context, query string, dest ...any) error {
	var id int64
	var mark sql.NullString
	if err := s.conn.QueryRowContext(ctx, query).Scan(append(dest, &id, &mark)...); err != nil {
		return err
	}
	if id != s.id || (s.mark != "" && mark.String != s.mark) {
		return errElsewhere
	}
	return nil
}

// check reads the session and the server, and refuses a server whose locks
// would not be the primary's, or a session that already holds the lock.
func (s *session) check(ctx context.Context, name string) error {
	var version, server string
	var holder sql.NullInt64
	err := s.conn.QueryRowContext(ctx,
		"SELECT CONNECTION_ID(), VERSION(), "+serverSQL+", IS_USED_LOCK("+literal(name)+")").
		Scan(&s.id, &version, &server, &holder)
	if err != nil {
		return fmt.Errorf("read the session: %w", err)
	}
	s.mariadb = strings.Contains(version, "MariaDB")
	s.server = server
	if !manyLocks(version, s.mariadb) {
		return fmt.Errorf("the server's version %s takes one GET_LOCK lock per session (a second releases the first): a shared session needs MySQL 5.7 or MariaDB 10.0.2 or newer", version)
	}
	rows, err := s.conn.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'super_read_only', 'wsrep_on')")
	if err != nil {
		return fmt.Errorf("read the server's variables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return fmt.Errorf("read the server's variables: %w", err)
		}
		if v != "ON" && v != "1" {
			continue
		}
		switch k {
		case "read_only", "super_read_only":
			return fmt.Errorf("%w: %s is %s", ErrReplica, k, v)
		case "wsrep_on":
			return fmt.Errorf("%w: %s is %s", ErrGalera, k, v)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the server's variables: %w", err)
	}
	if holder.Valid && holder.Int64 == s.id {
		return fmt.Errorf("%w: session %d", ErrHeld, s.id)
	}
	return nil
}

// probe marks the session, then checks from a second connection of the
// pool that the mark and the session's id are not seen there, and from the
// session that they are: a pooler that shares server sessions shows one of
// them to both. It runs before the session's timeouts are set, which such a
// pooler would hand to its other clients.
func (s *session) probe(ctx context.Context) error {
	var b [16]byte
	rand.Read(b[:])
	mark := hex.EncodeToString(b[:])
	if _, err := s.conn.ExecContext(ctx, "SET "+markVar+" = '"+mark+"'"); err != nil {
		return fmt.Errorf("mark the session: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, s.bound)
	defer cancel()
	other, err := s.db.Conn(pctx)
	if err != nil {
		if ctx.Err() == nil {
			return fmt.Errorf("probe: no second connection of the pool within %v (a Lock in progress needs two; is the pool's MaxOpenConns too small for the Locks and leases it serves?): %w", s.bound, err)
		}
		return fmt.Errorf("probe: take a second connection: %w", err)
	}
	defer other.Close()
	var id int64
	var seen sql.NullString
	if err := other.QueryRowContext(ctx, "SELECT CONNECTION_ID(), "+markVar).Scan(&id, &seen); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if id == s.id || seen.String == mark {
		return fmt.Errorf("%w: a second connection of the pool reached the lease's session %d", ErrPooled, s.id)
	}
	s.mark = mark
	if err := s.row(ctx, "SELECT 1"+tail, new(int)); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return nil
}

// set sets the session's timeouts: the server keeps it ServerTimeout after
// it last heard from it, and nothing else ends it or cuts a statement. A
// statement of a shared session holds up every lease on it, so the
// fencing token's statement waits for its row's lock and its table's at
// most a quarter of the deadline (at least 1 s, the floor of both): then it
// fails alone (error 1205), and the session's next heartbeat is on time.
func (s *session) set(ctx context.Context, c Config) error {
	t := strconv.FormatInt(int64(c.ServerTimeout/time.Second), 10)
	lockWait := strconv.FormatInt(max(1, int64(c.deadline()/4/time.Second)), 10)
	vars := []string{
		"wait_timeout = " + t, "interactive_timeout = " + t,
		"net_read_timeout = " + t, "net_write_timeout = " + t,
		"autocommit = 1",
		"lock_wait_timeout = " + lockWait, "innodb_lock_wait_timeout = " + lockWait,
	}
	if s.mariadb {
		vars = append(vars, "max_statement_time = 0",
			"idle_transaction_timeout = 0", "idle_readonly_transaction_timeout = 0", "idle_write_transaction_timeout = 0")
	} else {
		vars = append(vars, "max_execution_time = 0")
	}
	if _, err := s.conn.ExecContext(ctx, "SET SESSION "+strings.Join(vars, ", ")); err != nil {
		return fmt.Errorf("set the session's timeouts: %w", err)
	}
	return nil
}

// wait takes the lock with GET_LOCK in steps of step, each a statement
// answered within step + bound or the session is taken for silent. holder
// is the lock's holder seen before the wait (0 if unknown); wait returns the
// last one seen before the grant: each step that times out reads the holder
// at its end.
func (s *session) wait(ctx context.Context, name string, step, bound time.Duration, holder int64) (int64, error) {
	if !s.mariadb {
		// MySQL reads GET_LOCK's timeout as whole seconds.
		step = max(time.Second, (step+time.Second-1)/time.Second*time.Second)
	}
	for {
		got, h, err := s.getLock(ctx, name, step, bound)
		if err != nil {
			return 0, err
		}
		if got {
			return holder, nil
		}
		if h != 0 {
			holder = h
		}
	}
}

// getLock runs GET_LOCK(name, step) once, a statement answered within step
// + bound or the session is taken for silent, and reports whether the
// session took the lock, and otherwise the lock's holder at the step's end
// (0 if none).
func (s *session) getLock(ctx context.Context, name string, step, bound time.Duration) (bool, int64, error) {
	q := "SELECT GET_LOCK(" + literal(name) + ", " + seconds(step) + "), IS_USED_LOCK(" + literal(name) + ")" + tail
	sctx, cancel := context.WithTimeout(ctx, step+bound)
	var got, holder sql.NullInt64
	err := s.row(sctx, q, &got, &holder)
	silent := sctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case ctx.Err() != nil:
		return false, 0, fmt.Errorf("the wait was cut by its context: %w", context.Cause(ctx))
	case silent:
		return false, 0, fmt.Errorf("%w: a step of the wait (GET_LOCK for %v) was not answered within %v more", ErrUnresponsive, step, bound)
	case err != nil:
		return false, 0, fmt.Errorf("wait: %w", causeOf(err))
	case !got.Valid:
		return false, 0, fmt.Errorf("wait: %w: GET_LOCK returned NULL: the server interrupted it", ErrKilled)
	}
	return got.Int64 == 1, holder.Int64, nil
}

// checkFence runs the fencing statement on table (quoted) without writing
// a row: the server checks the table, its columns and the user's INSERT and
// UPDATE privileges, so that a mistake fails Lock before it waits for the
// lock.
func (s *session) checkFence(ctx context.Context, table, name string) error {
	_, err := s.conn.ExecContext(ctx, "INSERT INTO "+table+" (name, token) SELECT "+literal(name)+
		", 0 FROM DUAL WHERE 1 = 0 ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)")
	if err != nil {
		return fmt.Errorf("fencing table %s: %w", table, err)
	}
	return nil
}

// fence increments the lock's row of table (quoted) in the session and
// returns the new token.
func (s *session) fence(ctx context.Context, table, name string) (int64, error) {
	res, err := s.conn.ExecContext(ctx, "INSERT INTO "+table+" (name, token) VALUES ("+literal(name)+
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

// kill sends KILL QUERY (or KILL CONNECTION) for the session through
// another connection of the pool, once that connection shows the session's
// server: behind a load balancer, a session id of another server names
// another session. A user may kill its own sessions without a privilege.
func (s *session) kill(ctx context.Context, what string) error {
	if s.id == 0 {
		return errors.New("no session id")
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var server string
	if err := conn.QueryRowContext(ctx, "SELECT "+serverSQL).Scan(&server); err != nil {
		return err
	}
	if server != s.server {
		return fmt.Errorf("the pool's connection is on %s, not on the lease's server %s: no KILL sent", server, s.server)
	}
	_, err = conn.ExecContext(ctx, "KILL "+what+" "+strconv.FormatInt(s.id, 10))
	return err
}

// awaitGone waits, for at most the session's grace, until the server no
// longer lists the session: a lock the dying session was granted is free
// again by then. It asks through another connection of the pool, every
// 5 ms; a session of the pool's own user is listed without the PROCESS
// privilege.
func (s *session) awaitGone() {
	if s.id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	for {
		var n int64
		err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", s.id).Scan(&n)
		if err != nil || n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// discard closes the session's connection for good: the pool does not get
// it back, and the server ends the session when it sees the close.
func (s *session) discard() {
	s.conn.Raw(func(any) error { return driver.ErrBadConn })
	s.conn.Close()
}

// abandon ends the session of a Lock that failed: KILL CONNECTION, bounded
// by the grace, so that neither a waiter nor a lock is left on the server,
// then the close, and returns once the server no longer lists it.
func (s *session) abandon() {
	if s.id != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.grace)
		s.kill(ctx, "CONNECTION")
		cancel()
	}
	s.discard()
	s.awaitGone()
}

// causeOf returns the cause of a loss for err, the error of a statement of
// the lease's session, wrapped with err.
func causeOf(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1317, 1927: // ER_QUERY_INTERRUPTED, ER_CONNECTION_KILLED
			return fmt.Errorf("%w: %w", ErrKilled, err)
		case 1053: // ER_SERVER_SHUTDOWN
			return fmt.Errorf("%w: %w", ErrShutdown, err)
		}
		return err
	}
	if errors.Is(err, ErrPooled) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrConnLost, err)
}

// manyLocks reports whether a server of version holds many GET_LOCK locks
// in one session: MySQL 5.7 and MariaDB 10.0.2 and newer. Before, a
// GET_LOCK released the session's lock.
func manyLocks(version string, mariadb bool) bool {
	var v [3]int
	for i, f := range strings.SplitN(strings.SplitN(version, "-", 2)[0], ".", 3) {
		v[i], _ = strconv.Atoi(f)
	}
	want := [3]int{5, 7, 0}
	if mariadb {
		want = [3]int{10, 0, 2}
	}
	for i := range v {
		if v[i] != want[i] {
			return v[i] > want[i]
		}
	}
	return true
}
