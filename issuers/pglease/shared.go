package pglease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/zukhruf/lease/health"
)

// notifyChannel is the channel on which an Unlock of a shared session
// announces its release (pg_notify, the key in decimal as the payload), and
// on which every shared session listens, so that a Lock waiting for that
// key, in any process on the database, tries it again at once.
const notifyChannel = "pglease"

// fenceWait is the lock_timeout of a shared session: the longest its
// fencing token's write waits for a guarded write's row before Lock
// retries it, and so the longest a statement holds up the session's
// heartbeats.
const fenceWait = 10 * time.Millisecond

// statementsSent counts the statements, heartbeats among them, that the
// shared sessions of this process sent: the tests' count of the load the
// leases put on the server.
var statementsSent atomic.Int64

// A shared is a session that many leases share: it holds their locks, one
// heartbeat confirms them all, and its end loses them all. It owns its
// connection, hijacked from the pool.
//
// Every statement on it is a simple query written on the connection at
// once, without waiting for the replies of those before it; one goroutine
// (follow) reads the replies, which come in the order of the statements, and
// another (keep) sends a heartbeat every Heartbeat and loses every lease on
// the session once no statement sent in the last Deadline was answered. No
// statement waits on the server for more than fenceWait: a Lock that must
// wait for a lock held elsewhere waits in the process (see
// [Config.lockShared]), so nothing stops the heartbeats of the other leases.
type shared struct {
	set *sessionSet
	s   *session
	nc  net.Conn
	id  lockID // the server's system identifier and the database; key 0

	wmu       sync.Mutex    // orders the writes and the queue of replies
	queue     []*pending    // statements written and not yet answered, in order
	confirmed time.Time     // send time of the last statement answered by the session
	err       error         // the session's end, once known
	left      time.Duration // the deadline less the time the statement at confirmed was answered

	observers atomic.Int32 // leases on the session with an observer, told of the grant
	risk      health.Watch // AtRisk when the session's statements go unconfirmed, armed only while observers > 0
	riskArms  atomic.Int64 // how many times risk was armed, for the tests

	quit chan struct{} // closed at the end: keep returns
	done chan struct{} // closed when follow returned and the connection is closed
	kept chan struct{} // closed when keep returned

	// Guarded by set.mu.
	leases  map[*Lease]struct{}
	users   int       // leases, and Locks and Unlocks under way on the session
	idle    time.Time // when users last fell to 0
	dropped bool      // no longer in set.sessions
}

// pending is a statement written on a shared session and not yet answered.
type pending struct {
	sent      time.Time
	heartbeat bool
	rows      [][][]byte
	err       error
	reply     chan reply // nil for a heartbeat
}

// reply is the answer to a statement: its rows, each column copied, or its
// error.
type reply struct {
	rows [][][]byte
	err  error
}

// errSessionGone wraps the end of a shared session in the error of a
// statement that it did not answer.
type errSessionGone struct{ cause error }

func (e errSessionGone) Error() string { return "the shared session ended: " + e.cause.Error() }
func (e errSessionGone) Unwrap() error { return e.cause }

// newShared starts the goroutines of a session whose checks and settings
// are done, and whose last statement was sent at sent.
func newShared(set *sessionSet, s *session, id lockID, sent time.Time) *shared {
	id.key = 0
	sh := &shared{
		set:       set,
		s:         s,
		nc:        s.pc.Conn(),
		id:        id,
		confirmed: sent,
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		kept:      make(chan struct{}),
		leases:    make(map[*Lease]struct{}),
	}
	go sh.follow()
	go sh.keep()
	return sh
}

// queryMessage returns the Query message of sql.
func queryMessage(sql string) []byte {
	n := 4 + len(sql) + 1
	b := make([]byte, 0, 1+n)
	b = append(b, 'Q', byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	b = append(b, sql...)
	return append(b, 0)
}

// write writes msg on the connection and queues p for its reply. It fails
// once the session has ended, and ends it if the write fails.
func (sh *shared) write(p *pending, msg []byte) error {
	sh.wmu.Lock()
	if sh.err != nil {
		err := sh.err
		sh.wmu.Unlock()
		return errSessionGone{err}
	}
	p.sent = time.Now()
	sh.queue = append(sh.queue, p)
	statementsSent.Add(1)
	// A write blocks only when the socket's buffer is full; the deadline
	// keeps it from holding the session past its deadline.
	sh.nc.SetWriteDeadline(p.sent.Add(sh.set.cfg.Deadline))
	_, err := sh.nc.Write(msg)
	sh.wmu.Unlock()
	if err != nil {
		cause := fmt.Errorf("%w: send a statement: %w", ErrConnLost, err)
		sh.fail(cause)
		return errSessionGone{cause}
	}
	return nil
}

// exec sends sql, a statement gated on the session (see session.ours) whose
// last column is pg_backend_pid(), and returns its rows. It waits for the
// reply however long it takes: the session answers within Deadline of the
// send or keep ends it, which answers every statement with its end.
func (sh *shared) exec(sql string) ([][][]byte, error) {
	return sh.send(queryMessage(sql))
}

// send writes msg, a simple query or a prepared statement's execution
// (executeMessage), and returns its rows, as exec does.
func (sh *shared) send(msg []byte) ([][][]byte, error) {
	p := &pending{reply: make(chan reply, 1)}
	if err := sh.write(p, msg); err != nil {
		return nil, err
	}
	r := <-p.reply
	return r.rows, r.err
}

// follow reads the session's replies until its end, hands each its
// statement's rows, confirms the session by each answer, wakes the Locks
// waiting for a key whose release it hears, and ends the session at a
// FATAL error, a shutdown's warning, the end of the connection, or an
// answer from another server session. It closes the connection as it
// returns.
func (sh *shared) follow() {
	defer close(sh.done)
	defer sh.s.close()
	pc := sh.s.pc
	for {
		msg, err := pc.ReceiveMessage(context.Background())
		if err != nil {
			sh.fail(causeOf(err))
			return
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			p := sh.head()
			if p == nil {
				sh.fail(fmt.Errorf("%w: a row came with no statement pending", ErrConnLost))
				return
			}
			row := make([][]byte, len(m.Values))
			for i, v := range m.Values {
				row[i] = append([]byte(nil), v...)
			}
			p.rows = append(p.rows, row)
		case *pgproto3.ErrorResponse:
			pgErr := pgconn.ErrorResponseToPgError(m)
			p := sh.head()
			if p == nil || p.heartbeat || severity(pgErr) == "FATAL" || severity(pgErr) == "PANIC" {
				// An error between statements, or in reply to a heartbeat,
				// leaves the session in doubt.
				sh.fail(causeOf(pgErr))
				return
			}
			if p.err == nil {
				p.err = pgErr
			}
		case *pgproto3.NoticeResponse:
			pgErr := pgconn.ErrorResponseToPgError((*pgproto3.ErrorResponse)(m))
			if shutdown(pgErr) {
				sh.fail(fmt.Errorf("%w: %w", ErrShutdown, pgErr))
				return
			}
		case *pgproto3.NotificationResponse:
			if m.Channel == notifyChannel {
				if key, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
					sh.set.wake(key)
				}
			}
		case *pgproto3.ReadyForQuery:
			p := sh.pop()
			if p == nil {
				sh.fail(fmt.Errorf("%w: a reply came with no statement pending", ErrConnLost))
				return
			}
			if !sh.answer(p) {
				return
			}
		}
	}
}

// head returns the statement whose reply is being read, or nil.
func (sh *shared) head() *pending {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	if len(sh.queue) == 0 {
		return nil
	}
	return sh.queue[0]
}

// pop removes the statement whose reply was read.
func (sh *shared) pop() *pending {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	if len(sh.queue) == 0 {
		return nil
	}
	p := sh.queue[0]
	sh.queue[0] = nil
	sh.queue = sh.queue[1:]
	return p
}

// answer takes p's complete reply: a reply from the session confirms it as
// of p's send time and goes to p's caller; a heartbeat that failed, or a
// statement answered by another server session, ends the session. It
// reports whether the session goes on.
func (sh *shared) answer(p *pending) bool {
	s := sh.s
	ours := len(p.rows) == 1 && len(p.rows[0]) > 0 && pid(p.rows[0][len(p.rows[0])-1]) == s.backend
	if p.heartbeat {
		ok := p.err == nil && ours && len(p.rows[0]) == 2
		if ok {
			// The heartbeat's columns are the mark, then the process.
			ok = string(p.rows[0][0]) == s.marker
		}
		if !ok {
			sh.fail(fmt.Errorf("%w: a heartbeat was answered by a session that is not the lease's (%q; the session's server process is %d)",
				ErrPooled, p.rows, s.backend))
			return false
		}
		sh.confirm(p.sent)
		return true
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(p.err, &pgErr) && pgErr.Code == "26000": // invalid_sql_statement_name
		// A statement the session prepared is not there: another server
		// session ran it, or the session was reset under the issuer.
		sh.end(p, fmt.Errorf("%w: a statement the session prepared was unknown to the server session that ran it: %w", ErrPooled, p.err))
		return false
	case p.err != nil:
		// The server answered: an error of the statement's own, such as a
		// fencing table that does not exist, or a row it waited for too
		// long.
		sh.confirm(p.sent)
		p.reply <- reply{err: p.err}
	case len(p.rows) == 0:
		// A statement gated on the session did nothing: it reached another.
		sh.end(p, errElsewhere)
		return false
	case !ours:
		sh.end(p, fmt.Errorf("%w: a statement was answered by another server process than the session's %d", ErrPooled, s.backend))
		return false
	default:
		sh.confirm(p.sent)
		p.reply <- reply{rows: p.rows}
	}
	return true
}

// confirm records that the session answered a statement sent at sent.
func (sh *shared) confirm(sent time.Time) {
	sh.wmu.Lock()
	moved := sent.After(sh.confirmed)
	if moved {
		sh.confirmed = sent
		sh.left = time.Until(sent.Add(sh.set.cfg.Deadline))
	}
	sh.wmu.Unlock()
	if moved && sh.observers.Load() > 0 {
		sh.renewed(sent)
		sh.armRisk(sent)
	}
}

// lastConfirmed returns the send time of the last statement the session
// answered.
func (sh *shared) lastConfirmed() time.Time {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	return sh.confirmed
}

// heartbeatMessage is a shared session's heartbeat: the session's mark and its
// server process.
var heartbeatMessage = queryMessage("select pg_catalog.current_setting('" + markName + "', true), pg_catalog.pg_backend_pid()")

// keep sends a heartbeat every Heartbeat, and ends the session once no
// statement sent in the last Deadline has been answered, or once it has had
// no lease for idleLinger. It returns at the session's end.
func (sh *shared) keep() {
	defer close(sh.kept)
	cfg := sh.set.cfg
	tick := time.NewTicker(cfg.Heartbeat)
	defer tick.Stop()
	deadline := time.NewTimer(time.Until(sh.lastConfirmed().Add(cfg.Deadline)))
	defer deadline.Stop()
	for {
		select {
		case <-sh.quit:
			return
		case <-deadline.C:
			// The deadline only moves later as statements are answered:
			// the timer fires at the earliest, and is set again if an
			// answer came since.
			last := sh.lastConfirmed()
			if left := time.Until(last.Add(cfg.Deadline)); left > 0 {
				deadline.Reset(left)
				continue
			}
			sh.fail(fmt.Errorf("%w: the last heartbeat confirmed was sent %v ago, the deadline is %v",
				ErrUnresponsive, time.Since(last).Round(time.Millisecond), cfg.Deadline))
			return
		case <-tick.C:
			if sh.set.retire(sh) {
				sh.fail(errRetired)
				return
			}
			if err := sh.write(&pending{heartbeat: true}, heartbeatMessage); err != nil {
				return
			}
		}
	}
}

// errRetired ends a session that had no lease for idleLinger.
var errRetired = errors.New("pglease: the shared session had no lease for a while and was closed")

// fail ends the session with cause, once: it loses every lease on it, then
// answers every statement in flight with its end, and makes follow return,
// which closes the connection.
func (sh *shared) fail(cause error) {
	sh.wmu.Lock()
	if sh.err != nil {
		sh.wmu.Unlock()
		return
	}
	sh.err = cause
	queue := sh.queue
	sh.queue = nil
	sh.wmu.Unlock()
	leases := sh.set.drop(sh)
	lost := leases[:0]
	for _, l := range leases {
		if l.loseQuietly(cause) {
			lost = append(lost, l)
		}
	}
	close(sh.quit)
	sh.nc.SetDeadline(time.Unix(1, 0))
	for _, p := range queue {
		if p.reply != nil {
			p.reply <- reply{err: errSessionGone{cause}}
		}
	}
	// Every lease is lost before any observer is told, and the watch
	// stops after: nothing waits for an observer between knowing and the
	// losses.
	for _, l := range lost {
		l.lost(cause)
	}
	sh.risk.Stop()
}

// end ends the session with cause, as fail does, and answers p, a
// statement already taken from the queue, with its end.
func (sh *shared) end(p *pending, cause error) {
	sh.fail(cause)
	p.reply <- reply{err: errSessionGone{cause}}
}

// ended returns the session's end, or nil while it lasts.
func (sh *shared) ended() error {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	return sh.err
}
