package mysqllease

import "errors"

// The causes of a loss. A holder's [signal.Signal] reports a loss with a
// lost.Error that wraps one of these, itself wrapped with what the server or
// the driver said; match them with [errors.Is].
var (
	// ErrConnLost reports that the lease's connection ended or failed. The
	// session may be gone, and its lock with it. MariaDB ends a session
	// without a word to its client for a KILL CONNECTION, a shutdown of the
	// server and a crash alike (the client reads the end of the stream), as
	// a proxy that drops the connection does: the lease cannot tell them
	// apart, and reports each as ErrConnLost.
	ErrConnLost = errors.New("mysqllease: connection lost")

	// ErrKilled reports that the server interrupted the lease's statement:
	// a KILL QUERY of its session (error 1317), which leaves the lock held
	// but is an operator's act on the lease's session, or an error that
	// names the session's end (1927, ER_CONNECTION_KILLED, where the server
	// sends it).
	ErrKilled = errors.New("mysqllease: session killed")

	// ErrShutdown reports that the server said it is shutting down (error
	// 1053, ER_SERVER_SHUTDOWN, where the server sends it; MariaDB 10.11
	// closes the connection without it: ErrConnLost).
	ErrShutdown = errors.New("mysqllease: server shutting down")

	// ErrUnresponsive reports that no heartbeat was confirmed within the
	// deadline: ServerTimeout − Margin after the send time of the last one
	// confirmed. The server may soon end the silent session and free its
	// lock without telling it.
	ErrUnresponsive = errors.New("mysqllease: session stopped answering")

	// ErrPooled reports that a statement of the lease was answered by
	// another server session than the lease's, or by one without its mark:
	// the connection goes through a pooler or proxy that shares or moves
	// server sessions. Lock returns it, wrapped, before it takes the lock
	// when its probe sees the sharing; a live lease is lost with it.
	ErrPooled = errors.New("mysqllease: the connection goes through a pooler that shares or moves server sessions")
)

// ErrReplica is returned by Lock, wrapped, when the server is read-only
// (read_only or super_read_only): a replica grants GET_LOCK locks of its
// own, which know nothing of the primary's. Lock on the primary.
var ErrReplica = errors.New("mysqllease: the server is read-only (a replica), whose locks are not the primary's")

// ErrGalera is returned by Lock, wrapped, when the server is a node of a
// Galera cluster (wsrep_on): GET_LOCK is local to the node, and another
// holder may take the same lock on another node at the same time.
var ErrGalera = errors.New("mysqllease: the server is a Galera node (wsrep_on), where GET_LOCK holds on that node only")

// ErrHeld is returned by Lock, wrapped, when the session the pool gave it
// already holds the lock: code that took it through the same *sql.DB, and
// gave the connection back to the pool holding it. A lease on that session
// would share the lock with that code.
var ErrHeld = errors.New("mysqllease: the pool's session already holds the lock")

// ErrSessionEnded is wrapped by the error of [Lease.Unlock] when it could
// not release the lock with RELEASE_LOCK and ended the lease's session
// instead, which frees the lock: at once when the server sees the
// connection close, and at the latest ServerTimeout after it last heard
// from the session.
var ErrSessionEnded = errors.New("mysqllease: the lock was not released; the session was ended instead, which frees it")
