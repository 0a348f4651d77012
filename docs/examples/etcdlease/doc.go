// Package etcdlease issues leases from etcd: a lock with [Lock] and a
// leadership with [Campaign], each handing its holder a [signal.Signal] that
// is lost the moment etcd says the claim is gone, and never because the
// holder released it.
//
// It is an issuer in the sense of package controller: it keeps the
// controller.Controller of each lease to itself, calls its Lose when etcd
// reports the loss, and its End when the holder calls [Lease.Unlock] or
// [Lease.Resign]. It learns of a loss by push, never by polling:
//
//   - the session ends ([concurrency.Session.Done]): etcd revoked or expired
//     its lease ([ErrSessionExpired]), or its owner closed it
//     ([ErrSessionClosed]);
//   - a watch on the holder's key, from the revision the claim was granted
//     at (or, if etcd compacted that revision, from a read of the key),
//     reports the key deleted ([ErrKeyDeleted], or [ErrSessionExpired]
//     when etcd deleted it with the session's lease) or put again bound to
//     another etcd lease ([ErrKeyTakenOver]);
//   - the watch ends, its member loses its leader, or the client's
//     connection can reach no endpoint ([ErrClusterLost]).
//
// Each cause is wrapped with what etcd reported and reaches the holder inside
// a lost.Error: errors.Is(sig.Err(), etcdlease.ErrKeyDeleted) tells which.
//
// A signal warns the holder; it does not stop a write already on its way.
// [Lease.Revision], the create revision of the holder's key, is the fencing
// token a resource checks to refuse a holder that lost its lease (see ADR
// 0001, "a lease is not a fencing token", in the repository's docs/adr).
package etcdlease
