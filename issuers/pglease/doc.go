// Package pglease issues leases from PostgreSQL session-level advisory
// locks: [Lock] takes a connection of its own out of a pgxpool.Pool, waits
// until its session holds the lock of a subject, and hands its holder a
// [signal.Signal] that is lost the moment the lock may be gone, and never
// because the holder released it.
//
// The lease owns its session: Lock hijacks the connection from the pool, no
// method returns it, and [Lease.Unlock] closes it. The holder's code keeps
// the pool's other connections, and nothing it does with them reaches the
// lease's session.
//
// A session-level advisory lock is held until it is released or the session
// ends; the server frees it when the backend goes (pg_terminate_backend, a
// shutdown or restart, a crash, a failover to a standby, which holds no
// advisory locks, or one of the server's timeouts). The lease learns of it
// three ways:
//
//   - by push: a read stays pending on the connection while the holder works,
//     so a FATAL error or the end of the connection is seen at once
//     ([ErrTerminated], [ErrShutdown], [ErrConnLost]);
//   - by a deadline, for silence: a heartbeat confirms the session, and the
//     lease is lost once no heartbeat sent in the last [Config.Deadline] was
//     confirmed, before the server, whose timeouts Lock sets for the session,
//     may free the lock of a silent session ([ErrUnresponsive]);
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
