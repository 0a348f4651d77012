// Package mysqllease issues leases from MySQL and MariaDB GET_LOCK locks:
// [Lock] takes a connection of its own out of a *sql.DB, waits until its
// session holds the lock of a subject, and hands its holder a
// [signal.Signal] that is lost when the lock may be gone, and never because
// the holder released it: before the server may free the lock of a silent
// session, and as soon as the connection reads the end of a session the
// server ended (a KILL, a shutdown, a crash), which races the server's grant
// to a session waiting for the lock (see the README's fault table).
// [NewLocker] gives the same leases behind the root module's portable
// lease.TryLocker, with [Locker.TryLock], which takes a lock only if it is
// free now.
//
// The lease owns its session: Lock takes the connection with db.Conn, no
// method returns it, the pool never gets it back, and [Lease.Unlock] closes
// it. Nothing the holder does with db reaches the lease's session.
//
// A GET_LOCK lock is held until it is released or its session ends; the
// server ends a session, and frees its lock, without telling the client,
// for a KILL, a shutdown, a restart, a crash, a failover, or its own
// wait_timeout on a silent client. The lease learns of it three ways:
//
//   - by push: a heartbeat, SELECT SLEEP(Heartbeat), is always pending on
//     the connection, so the end of the session is read at once
//     ([ErrConnLost], [ErrKilled]);
//   - by a deadline, for silence: Lock sets the session's wait_timeout to
//     [Config.ServerTimeout], and the lease is lost once no heartbeat sent
//     in the last ServerTimeout − [Config.Margin] was confirmed, before the
//     server may free the lock of a silent session ([ErrUnresponsive]);
//   - within one process, by order: a Lock granted by the server does not
//     return while another lease of the process on the same lock is live.
//
// Each cause is wrapped with what the server or the driver said and reaches
// the holder inside a lost.Error: errors.Is(sig.Err(), mysqllease.ErrConnLost)
// tells which.
//
// Lock refuses a server whose locks are not the primary's: a read-only
// replica ([ErrReplica]) and a Galera node ([ErrGalera]); and a connection
// through a pooler or proxy that shares or moves server sessions
// ([ErrPooled]), before it takes a lock. After a failover, the promoted
// replica holds none of the old primary's locks: a holder on an old primary
// is told when its connection ends, and by its deadline when the old
// primary is only cut off.
//
// A signal warns the holder; it does not stop a write already on its way.
// [Config.Fence] takes a fencing token at the grant, in the lease's session,
// and [Lease.Token] says how a write checks it.
package mysqllease
