// Package pglease issues leases from PostgreSQL session-level advisory
// locks: [Lock] takes the lock of a subject on a session that the leases of
// its pgxpool.Pool share, and hands its holder a [signal.Signal] that is
// lost the moment the lock may be gone, and never because the holder
// released it.
//
// The issuer owns its sessions: a shared session is a connection hijacked
// from the pool, which no method returns and no caller reaches; it holds
// the locks of many leases, and one heartbeat confirms them all. The leases
// of one pool and Config use at most [Config.Sessions] of them (4 by
// default; a session takes a thousand leases before another opens), and a
// session's end loses every lease on it, and no other.
// [Config.OwnSession] gives a lease a session of its own instead. The
// holder's code keeps the pool's other connections, and nothing it does
// with them reaches a lease's session.
//
// A free lock is taken with pg_try_advisory_lock, its fencing token in the
// same statement; a lock held elsewhere is never waited for on the server,
// where the statement would hold up the session's heartbeats: the Lock
// waits in the process, woken by a lease's release, which notifies the
// waiters of every process (LISTEN/NOTIFY), or by its next try, at most
// half a second later, for a release that sends nothing. [Lease.Unlock]
// is one statement, and the session goes on.
//
// A session-level advisory lock is held until it is released or the session
// ends; the server frees it when the backend goes (pg_terminate_backend, a
// shutdown or restart, a crash, a failover to a standby, which holds no
// advisory locks, or one of the server's timeouts). The lease learns of it
// three ways:
//
//   - by push: a read stays pending on the session's connection while the
//     holder works, so a FATAL error or the end of the connection is seen at
//     once ([ErrTerminated], [ErrShutdown], [ErrConnLost]);
//   - by a deadline, for silence: a heartbeat confirms the session, and
//     every lease on it is lost once no statement sent in the last
//     [Config.Deadline] was answered, before the server, whose timeouts the
//     session sets, may free the locks of a silent session
//     ([ErrUnresponsive]);
//   - within one process, by order: a Lock granted by the server does not
//     return while another lease of the process on the same lock is live.
//
// Each cause is wrapped with what the server or the driver said and reaches
// the holder inside a lost.Error: errors.Is(sig.Err(), pglease.ErrTerminated)
// tells which.
//
// A session lock means nothing through a pooler in transaction or statement
// mode, which hands one server session to several clients: Lock refuses a
// connection through any pooler with [ErrPooled] before it takes a lock or
// changes a setting, and takes one through a pooler in session mode only
// when [Config.SessionPooler] says so. Lock refuses a standby in recovery
// ([ErrStandby]): a standby grants advisory locks of its own, which know
// nothing of the primary's. After a failover, the promoted standby holds
// none of the old primary's locks, so a holder on an old primary that still
// runs is never told; see the README's failover section.
//
// A lock's key is 64 bits of a digest of the subject ([Key]); a deployment
// that takes subjects from its users keys it with a secret
// ([Config.Secret]).
//
// [NewLocker] gives the same leases through the library's portable
// [lease.TryLocker], whose [Locker.TryLock] takes a lock with
// pg_try_advisory_lock and refuses one held now with [lease.ErrHeld].
//
// A signal warns the holder; it does not stop a write already on its way.
// The lock has no token of its own: [Config.Fence] takes one at the grant, in
// the lease's session, and [Lease.Token] says how a write checks it.
package pglease
