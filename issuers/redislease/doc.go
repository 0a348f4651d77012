// Package redislease issues leases from Redis keys: [Lock] takes a key and
// hands its holder a [signal.Signal] that is lost the moment another client
// could take the key, and never because the holder released it.
// [NewLocker] gives the same leases as a [github.com/zukhruf/lease.TryLocker].
//
// It is an issuer in the sense of package controller: it keeps the
// controller.Controller of each lease to itself, calls its Lose when the
// claim is gone or may be, and its End when the holder calls
// [Lease.Unlock]. It learns of a loss by push, and from its own clock:
//
//   - the key is tracked (CLIENT TRACKING over RESP3, which needs no
//     server configuration): Redis pushes an invalidation when any client
//     changes the key, and the lease reads it at once; it is lost if the key
//     is gone ([ErrDeleted]: deleted, flushed, a primary restarted without
//     persistence), holds another value ([ErrTakenOver]) or expires before
//     the deadline ([ErrExpired]);
//   - the lease renews the key's expiry and is lost at the local deadline,
//     the send time of the last write Redis confirmed plus the TTL less a
//     margin, unless a later write was confirmed by then
//     ([ErrRenewalUnconfirmed]); with replicas, a write is confirmed only
//     when as many replicas as the grant reached acknowledged it (WAIT), so
//     that the replica promoted in a failover holds the key with its
//     expiry (the rule and its clock assumption are stated at
//     [Config.Margin] and in the README); behind Sentinel, a grant also
//     needs a replica that has followed the primary for the TTL, and a
//     primary Sentinel still names after the grant (see [Config.Replicas]);
//   - a renewal finds the key gone or another value in it, or the server
//     answers as a replica ([ErrFailedOver]), or refuses it for good
//     ([ErrRefused]).
//
// A reconnection, the end of a connection or a renewal that timed out is
// never taken for a loss on its own: only the deadline says that silence
// lasted too long.
//
// The deadline keeps the holder ahead of every client that waits for the
// key to expire. A write from outside the rule, an operator's DEL, SET or
// FLUSHALL, frees the key at once for waiting clients and holder alike: the
// holder is lost as soon as Redis pushes the change to it, and a waiting
// Lock may be granted as fast; only the token protects the resource there.
// A failover to a replica that never had the key (possible only when
// Config.Replicas asks for fewer replicas than the primary has) and a
// primary restarted without persistence are races of the same kind: the
// holder is lost when its connection reaches the new server.
//
// Each cause is wrapped with what Redis said and reaches the holder inside
// a lost.Error: errors.Is(sig.Err(), redislease.ErrDeleted) tells which.
//
// A signal warns the holder; it does not stop a write already on its way.
// [Lease.Token], counted in the key's hash slot with every grant, is the
// fencing token a resource checks to refuse a holder that lost its lease
// (see ADR 0001, "a lease is not a fencing token", in the repository's
// docs/adr).
package redislease
