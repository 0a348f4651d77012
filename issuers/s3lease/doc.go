// Package s3lease issues leases from S3 lock objects: [Lock] takes an
// object with a conditional PutObject and hands its holder a
// [signal.Signal] that is lost before any other client may take the object
// over, and never because the holder released it. [NewLocker] gives the
// same leases as a [github.com/zukhruf/lease.TryLocker].
//
// It is an issuer in the sense of package controller: it keeps the
// controller.Controller of each lease to itself, calls its Lose when the
// claim is gone or may be, and its End when the holder calls
// [Lease.Unlock]. S3 pushes nothing and keeps no expiry, so the lease
// learns of a loss from its own renewals and its own clock:
//
//   - every RenewPeriod the lease rewrites its lock object with a new
//     expiry, conditional on If-Match with the ETag of its last write; it
//     is lost at once if the store refuses the write because the object
//     changed ([ErrTakenOver]: another holder took it over, an operator
//     overwrote it) or is gone ([ErrDeleted]). An operator's write is so
//     learnt within a RenewPeriod and a round trip, not sooner;
//   - the lease is lost at the local deadline, the send time of the last
//     write the store confirmed plus the TTL less [Config.ClockSkew] and
//     [Config.Margin], unless a later write was confirmed by then
//     ([ErrRenewalUnconfirmed]). Waiters judge the holder's written expiry
//     by their own clocks; the rule and its clock assumption are stated in
//     deadline.go and the README's "The deadline".
//
// A slow or failed renewal is never taken for a loss on its own: only the
// deadline says that the store was silent too long.
//
// [Lease.Health] reads how close a lease is to its deadline, and
// [Config.Observer] is told of each lease's grant, renewals, failed
// renewals, risk, loss and release (package
// [github.com/zukhruf/lease/health]), after the fact.
//
// Lock refuses a store that does not honour conditional writes: the first
// Lock of a client on a bucket probes it ([ErrUnsafeStore]).
//
// A signal warns the holder; it does not stop a write already on its way.
// [Lease.Token], the lock object's epoch, is the fencing token a resource
// checks to refuse a holder that lost its lease (see ADR 0001, "a lease is
// not a fencing token", in the repository's docs/adr, and the s3fence
// module for a fence on an S3 object).
package s3lease
