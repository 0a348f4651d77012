// Package natslease issues leases from the keys of a NATS JetStream KV
// bucket: [Lock] takes a key and hands its holder a [signal.Signal] that is
// lost the moment another client could take the key, and never because
// the holder released it. [NewLocker] gives the same leases as a
// [github.com/zukhruf/lease.TryLocker].
//
// It is an issuer in the sense of package controller: it keeps the
// controller.Controller of each lease to itself, calls its Lose when the
// claim is gone or may be, and its End when the holder calls
// [Lease.Unlock]. The key is granted by a Create (only if absent) with a
// per-key TTL, and renewed by a write at its last revision with the same
// TTL. The lease learns of a loss by push, and from its own clock:
//
//   - one KV watcher of the bucket, shared by every lease of the client,
//     reads each write of the bucket at once: the lease is lost if its key
//     is deleted ([ErrDeleted]), purged or expired on the server
//     ([ErrPurged]), or written by another client ([ErrTakenOver]);
//   - the lease is lost at the local deadline, the send time of the last
//     write the server confirmed plus the TTL less a margin, unless a later
//     write was confirmed by then ([ErrRenewalUnconfirmed]); the rule and
//     its clock assumption are stated at [Config.Margin] and in the README;
//   - a renewal is refused for good ([ErrRefused]): a permission taken
//     away, the bucket deleted.
//
// A reconnection, a leader election or a renewal that timed out is never
// taken for a loss on its own: only the deadline says that silence lasted
// too long.
//
// The deadline keeps the holder ahead of every client that waits for the
// key to expire. A write from outside the rule, an operator's delete, purge
// or put, frees the key at once for waiting clients and holder alike: the
// holder is lost as soon as its watcher reads the write, and a waiting
// Lock, woken by the same write, is granted a round trip later; only the
// token protects the resource there.
//
// Each cause is wrapped with what the server said and reaches the holder
// inside a lost.Error: errors.Is(sig.Err(), natslease.ErrDeleted) tells
// which.
//
// [Lease.Health] tells how close the lease is to its deadline, and
// [Config.Observer] is told of each lease's grant, renewals, failed renewals,
// risk, and its loss or release, after the fact (see package health).
//
// A signal warns the holder; it does not stop a write already on its way.
// [Lease.Token], the revision of the grant (the bucket's stream sequence),
// is the fencing token a resource checks to refuse a holder that lost its
// lease (see ADR 0001, "a lease is not a fencing token", in the
// repository's docs/adr).
package natslease
