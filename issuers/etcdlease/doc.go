// Package etcdlease issues leases from etcd: a lock with [Lock] and a
// leadership with [Campaign], each handing its holder a [signal.Signal] that
// is lost the moment etcd says the claim is gone, and never because the
// holder released it.
//
// It is an issuer in the sense of package controller: it keeps the
// controller.Controller of each lease to itself, calls its Lose when the
// claim is gone or may be, and its End when the holder calls [Lease.Unlock]
// or [Lease.Resign]. It learns of a loss by push, and from its own clock:
//
//   - a watch on the holder's key, from the revision the claim was granted
//     at (or, if etcd compacted that revision, from a read of the key),
//     reports the key deleted ([ErrKeyDeleted], by hand or with a revoked
//     etcd lease of the session) or put again bound to another etcd lease
//     ([ErrKeyTakenOver]);
//   - the leases of a session renew its etcd lease on one stream they
//     share, beside the session's own, and each is lost at the local
//     deadline, the send time of the last renewal etcd confirmed plus the
//     TTL it granted less a margin, unless a later renewal was confirmed ([ErrRenewalUnconfirmed], see [WithMargin]); or
//     etcd answers a renewal that it has no such lease ([ErrSessionExpired]),
//     or refuses it ([ErrRenewalRefused]);
//   - the session ends ([concurrency.Session.Done]): its owner closed it
//     ([ErrSessionClosed]);
//   - the watch ends, its member loses its leader, or the client's
//     connection can reach no endpoint ([ErrClusterLost]).
//
// The leases of one session (and one margin) share what follows them: one
// renewal stream, one watch stream that carries a watch of each lease's
// key, and no goroutine of their own; a lease costs its entries in a few
// maps. What a failure of a shared stream does to them is in the README,
// "Many leases on one session".
//
// No loss waits for a question to etcd: another holder may be granted the
// claim as soon as etcd publishes its loss.
//
// Each cause is wrapped with what etcd reported and reaches the holder inside
// a lost.Error: errors.Is(sig.Err(), etcdlease.ErrKeyDeleted) tells which.
//
// A signal warns the holder; it does not stop a write already on its way.
// [Lease.Token], the create revision of the holder's key, is the fencing
// token a resource checks to refuse a holder that lost its lease (see ADR
// 0001, "a lease is not a fencing token", in the repository's docs/adr).
//
// A [Locker] takes locks through one session as a
// [github.com/zukhruf/lease.TryLocker], the API every issuer of the
// repository implements, which adds TryLock.
package etcdlease
