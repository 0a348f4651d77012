package pglease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// heartbeat is the heartbeat message: a simple query, which the server
// answers with the session's process id and mark (see session.ours), and
// ReadyForQuery.
var heartbeat = func() []byte {
	q := probeSQL + "\x00"
	n := 4 + len(q)
	return append([]byte{'Q', byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, q...)
}()

// closeTimeout bounds the close of a lost lease's connection.
const closeTimeout = time.Second

// keep sends a heartbeat every Heartbeat and loses the lease once no
// heartbeat sent in the last Deadline has been confirmed. It returns at the
// loss or when quit is closed.
//
// Heartbeats are written on the connection directly while follow's read is
// pending through pgconn: the connection carries nothing else while the
// Lease owns it, and net.Conn allows a write beside a read.
func (l *Lease) keep() {
	defer close(l.kept)
	tick := time.NewTicker(l.cfg.Heartbeat)
	defer tick.Stop()
	l.mu.Lock()
	due := l.confirmed.Add(l.cfg.Deadline)
	l.mu.Unlock()
	deadline := time.NewTimer(time.Until(due))
	defer deadline.Stop()
	for {
		select {
		case <-l.quit:
			return
		case <-deadline.C:
			// The deadline only moves later as heartbeats are confirmed:
			// the timer fires at the earliest, and is set again if a
			// confirmation came since.
			l.mu.Lock()
			last := l.confirmed
			l.mu.Unlock()
			if left := time.Until(last.Add(l.cfg.Deadline)); left > 0 {
				deadline.Reset(left)
				continue
			}
			l.lose(fmt.Errorf("%w: the last heartbeat confirmed was sent %v ago, the deadline is %v",
				ErrUnresponsive, time.Since(last).Round(time.Millisecond), l.cfg.Deadline))
			return
		case <-tick.C:
			l.mu.Lock()
			l.sent = append(l.sent, time.Now())
			l.mu.Unlock()
			// A write blocks only when the socket's buffer is full; the
			// deadline keeps it from holding up the deadline's check.
			l.nc.SetWriteDeadline(time.Now().Add(l.cfg.Heartbeat))
			if _, err := l.nc.Write(heartbeat); err != nil {
				l.lose(fmt.Errorf("%w: send a heartbeat: %w", ErrConnLost, err))
				return
			}
		}
	}
}

// follow keeps a read pending on the connection and loses the lease on a
// FATAL error, an immediate shutdown's warning, the end of the connection,
// or a heartbeat answered by another server process; it records each
// heartbeat's confirmation. It returns at the loss, or when Unlock stops it
// once the heartbeats in flight are answered or its wait for them ends.
func (l *Lease) follow() {
	defer close(l.read)
	pc := l.s.pc
	for {
		msg, err := pc.ReceiveMessage(context.Background())
		if err != nil {
			l.mu.Lock()
			stopping := l.stopping
			l.mu.Unlock()
			var netErr net.Error
			if stopping && errors.As(err, &netErr) && netErr.Timeout() && l.ctrl.Signal().Err() == nil {
				return // Unlock ended the read; it counts the replies missing
			}
			l.lose(causeOf(err))
			l.close()
			return
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			if len(m.Values) != 2 || pid(m.Values[0]) != l.s.backend || string(m.Values[1]) != l.s.marker {
				l.lose(fmt.Errorf("%w: a heartbeat was answered by a session that is not the lease's (%q; the lease's server process is %d)",
					ErrPooled, m.Values, l.s.backend))
				l.close()
				return
			}
		case *pgproto3.ReadyForQuery:
			l.mu.Lock()
			var confirmed time.Time
			if len(l.sent) > 0 {
				if s := l.sent[0]; s.After(l.confirmed) {
					l.confirmed, confirmed = s, s
				}
				l.sent = l.sent[1:]
			}
			done := l.stopping && len(l.sent) == 0
			l.mu.Unlock()
			if !confirmed.IsZero() {
				l.heartbeatConfirmed(confirmed)
			}
			if done {
				return
			}
		case *pgproto3.NoticeResponse:
			// An immediate shutdown, or a crash of another backend, is
			// announced as a WARNING, then the connection ends.
			pgErr := pgconn.ErrorResponseToPgError((*pgproto3.ErrorResponse)(m))
			if shutdown(pgErr) {
				l.lose(fmt.Errorf("%w: %w", ErrShutdown, pgErr))
				l.close()
				return
			}
		case *pgproto3.ErrorResponse:
			// A connection whose OnPgError keeps it open after a FATAL
			// error hands the error here rather than as a failure; an error
			// in reply to a heartbeat leaves the session in doubt all the
			// same.
			l.lose(causeOf(pgconn.ErrorResponseToPgError(m)))
			l.close()
			return
		}
	}
}

// lose loses the lease with cause, unless it was released, and reports
// whether this call lost it. The lease is lost first; then the lock is no
// longer this process's, the heartbeats stop, and the connection's deadline
// passes, so that follow returns and closes it.
func (l *Lease) lose(cause error) bool {
	if !l.loseQuietly(cause) {
		return false
	}
	l.lost(cause)
	return true
}

// loseQuietly is lose without the observer's event, which the caller
// reports with l.lost once it has lost every lease it must.
func (l *Lease) loseQuietly(cause error) bool {
	if !l.ctrl.Lose(cause) {
		return false
	}
	l.unclaim()
	if l.sh != nil {
		return true // the shared session's end lost it, and closes the session
	}
	l.quitOnce.Do(func() { close(l.quit) })
	l.nc.SetDeadline(time.Unix(1, 0))
	return true
}

// causeOf returns the cause of a loss that ended the pending read with err.
// Between statements the server has nothing to report but its end: an error
// that does not end the backend leaves the session in doubt all the same.
func causeOf(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && shutdown(pgErr):
		return fmt.Errorf("%w: %w", ErrShutdown, pgErr)
	case errors.As(err, &pgErr) && (severity(pgErr) == "FATAL" || severity(pgErr) == "PANIC"):
		return fmt.Errorf("%w: %w", ErrTerminated, pgErr)
	case errors.As(err, &pgErr):
		return fmt.Errorf("%w: the server reported an error between statements: %w", ErrConnLost, pgErr)
	default:
		return fmt.Errorf("%w: %w", ErrConnLost, err)
	}
}

// severity returns pgErr's severity in English, whatever lc_messages is.
func severity(pgErr *pgconn.PgError) string {
	if pgErr.SeverityUnlocalized != "" {
		return pgErr.SeverityUnlocalized
	}
	return pgErr.Severity
}

// shutdown reports whether pgErr announces an immediate shutdown or a crash.
func shutdown(pgErr *pgconn.PgError) bool {
	switch pgErr.Code {
	case "57P02", "57P03": // crash_shutdown, cannot_connect_now
		return true
	case "57P01": // admin_shutdown: FATAL for a terminate or a fast shutdown, WARNING for an immediate one
		return strings.Contains(pgErr.Message, "immediate shutdown") || severity(pgErr) == "WARNING"
	}
	return false
}
