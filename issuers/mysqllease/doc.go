// Package mysqllease issues leases from MySQL and MariaDB GET_LOCK locks:
// [Lock] takes the GET_LOCK lock of a subject on a server session that the
// issuer shares among the leases of one *sql.DB, and hands its holder a
// [signal.Signal] that is lost when the lock may be gone, and never because
// the holder released it: before the server may free the locks of a silent
// session, and as soon as the server ends a session (a KILL, a shutdown, a
// crash), which races the server's grant to a session waiting for the lock
// (see the README's fault table). [NewLocker] gives the same leases behind
// the root module's portable lease.TryLocker, with [Locker.TryLock], which
// takes a lock only if it is free now.
//
// The issuer owns its sessions: it takes their connections with db.Conn, no
// method returns them, and the pool never gets them back. Nothing the holder
// does with db reaches them. A session holds many locks (MySQL 5.7,
// MariaDB 10.0.2 and newer); the leases of one *sql.DB share at most
// [Config.Sessions] of them (4), up to 1,000 leases each, and a session's end
// loses every lease on it at once, and no other. Locks that wait for a
// lock held elsewhere wait on at most [Config.Waiters] sessions of their
// own (4), and beyond them poll on the shared sessions. [Config.Alone]
// gives a lease a session of its own.
//
// A GET_LOCK lock is held until it is released or its session ends; the
// server ends a session, and frees its locks, without telling the client,
// for a KILL, a shutdown, a restart, a crash, a failover, or its own
// wait_timeout on a silent client. The leases learn of it three ways:
//
//   - by push: a second connection, the session's watcher, waits in
//     GET_LOCK for a lock that the session took first, and the server
//     grants it the moment it ends the session ([ErrConnLost]);
//   - by a deadline, for silence: Lock sets the session's wait_timeout to
//     [Config.ServerTimeout], a heartbeat confirms the session every
//     [Config.Heartbeat], and its leases are lost once no statement sent in
//     the last ServerTimeout − [Config.Margin] was answered, before the
//     server may free the locks of a silent session ([ErrUnresponsive]);
//   - within one process, by order: a Lock granted by the server does not
//     return while another lease of the process on the same lock is live;
//   - between processes, by a grace: a waiting Lock granted a lock whose
//     previous holder's session has ended since returns [Config.Grace]
//     later, once that holder, a lease of this package, knows.
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
// [Lease.Health] reads a lease's deadline, and [Config.Observer] is told of
// its grant, its session's confirmations, a heartbeat the server refused,
// the session's warning a third of the span before its deadline when no
// statement was confirmed since (AtRisk), its loss and its release: one
// warning timer for each session, as there is one deadline, fanned out to
// the observed leases on it.
//
// A signal warns the holder; it does not stop a write already on its way.
// [Config.Fence] takes a fencing token at the grant, in the lease's session,
// and [Lease.Token] says how a write checks it.
package mysqllease
