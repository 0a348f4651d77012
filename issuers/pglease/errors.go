package pglease

import "errors"

// The causes of a loss. A holder's [signal.Signal] reports a loss with a
// lost.Error that wraps one of these, itself wrapped with what the server or
// the driver said; match them with [errors.Is].
var (
	// ErrTerminated reports that the server ended the lease's backend with a
	// FATAL error, and freed its lock with it. PostgreSQL sends the same
	// message, "terminating connection due to administrator command"
	// (SQLSTATE 57P01), for pg_terminate_backend and for a fast shutdown or
	// restart: the connection cannot tell them apart. (A smart shutdown waits
	// for the sessions to end, and leaves the lease alone.) Other FATAL
	// errors, such as an idle-session timeout (57P05), are reported the same
	// way, with their own message.
	ErrTerminated = errors.New("pglease: backend terminated")

	// ErrShutdown reports that the server shut down at once: an immediate
	// shutdown or restart, or a crash of another server process, each
	// announced by the backend as it exits (SQLSTATE 57P01 with "immediate
	// shutdown", 57P02, 57P03). The announcement is best effort: when it
	// does not come, the end of the connection is reported as ErrConnLost.
	ErrShutdown = errors.New("pglease: server shut down")

	// ErrConnLost reports that the connection to the backend failed or was
	// closed without a word from the server: the session may have ended,
	// and nothing would tell the holder if it had.
	ErrConnLost = errors.New("pglease: connection lost")

	// ErrUnresponsive reports that no heartbeat sent in the last
	// [Config.Deadline] was confirmed: the session stopped answering, and
	// the server may soon free its lock without telling it.
	ErrUnresponsive = errors.New("pglease: session stopped answering")
)

// ErrStandby is returned by Lock, wrapped, when the connection is to a
// standby in recovery. A standby grants advisory locks of its own, in its
// own memory, which know nothing of those held on the primary or on another
// standby: a lease taken there could be held while another holder has the
// same lock on the primary. Lock on the primary.
var ErrStandby = errors.New("pglease: the server is a standby in recovery, whose advisory locks are not the primary's")

// ErrPooled is returned by Lock, wrapped, when the connection reaches the
// server through a pooler and [Config.SessionPooler] is not set: the
// process id the connection reported at startup is not its session's
// pg_backend_pid(). A pooler in transaction or statement mode hands one
// server session to several clients in turn, and a session lock taken
// through it is held by whichever client's statements reach that session
// next, or by none: two holders, both told nothing. Lock then changes
// nothing in the session and takes no lock. Connect the pool directly, or
// through a pooler in session mode and set Config.SessionPooler.
//
// With SessionPooler set, ErrPooled reports that a statement of Lock or a
// heartbeat was answered by another server process than the session's: a
// lease live at that moment is lost with it.
var ErrPooled = errors.New("pglease: the connection goes through a pooler that may share its session")

// ErrNotGranted is returned by Lock, wrapped, when pg_advisory_lock returned
// and pg_locks does not show the lock granted to the lease's session: Lock
// checks the grant before it hands out a lease, and then releases what the
// session may hold and closes it.
var ErrNotGranted = errors.New("pglease: the server did not grant the lock to the lease's session")

// ErrSessionEnded is wrapped by the error of [Lease.Unlock] when it could
// not release the lock with pg_advisory_unlock and ended the lease's
// session instead, which frees the lock: at once when the server sees the
// connection close, and at the latest ServerTimeout after it last heard
// from the session.
var ErrSessionEnded = errors.New("pglease: the lock was not released; the session was ended instead, which frees it")
