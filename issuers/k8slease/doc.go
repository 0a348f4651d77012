// Package k8slease issues leases from Kubernetes Lease objects
// (coordination.k8s.io/v1), the objects client-go's leader election writes:
// [Lock] takes one and hands its holder a [signal.Signal] that is lost the
// moment another candidate could take the Lease over, and never because the
// holder released it. [NewLocker] gives the same leases through
// lease.TryLocker, the API every issuer of the repository implements, a
// subject being a Lease's name.
//
// It is an issuer in the sense of package controller: it keeps the
// controller.Controller of each lease to itself, calls its Lose when the
// claim is gone or may be, and its End when the holder calls
// [Lease.Unlock]. It writes the record in client-go's LeaderElectionRecord
// form and takes a Lease over by client-go's rule, so k8slease holders and
// client-go candidates can share a Lease, as in a rolling upgrade from one to
// the other. It learns of a loss by push, and from its own clock:
//
//   - a watch of the namespace's Leases, one for all the leases of a
//     clientset and namespace, reports the record naming another holder, or
//     none ([ErrTakenOver]: another candidate took it over, an operator
//     edited it, a client-go candidate released it), or the Lease deleted
//     ([ErrDeleted]);
//   - the lease renews the record and is lost at the local deadline, the
//     start of the second of the last renewal's send time that the
//     apiserver confirmed, plus the lease duration, less a margin
//     ([ErrRenewalUnconfirmed]; the rule and the margin are argued at
//     [Config.Margin] and in the README);
//   - a renewal meets a conflict and the read that follows finds another
//     holder ([ErrTakenOver]) or no Lease ([ErrDeleted]), or the apiserver
//     refuses it for good ([ErrRefused]).
//
// No loss waits for a question to the apiserver, and the end of a watch, a
// renewal that timed out or met a reset, or a reconnection is never taken
// for a loss: only the deadline says that silence lasted too long.
//
// The deadline keeps the holder ahead of every candidate that takes the
// Lease over by the rule. A write from outside the rule, an operator's edit
// or deletion of the Lease, frees it at once for candidates and holder
// alike: the holder is lost as soon as its watch reports the write, and a
// candidate may be granted as fast; only the token protects the resource
// there.
//
// Each cause is wrapped with what the apiserver reported and reaches the
// holder inside a lost.Error: errors.Is(sig.Err(), k8slease.ErrTakenOver)
// tells which.
//
// A mistake that no retry mends (an invalid name, a Role without one of the
// verbs get, create, update and watch on leases, a wrong credential or CA,
// a value out of range) fails [Config.Lock] at once with an error that names
// it; the README's "what you may get wrong" lists each with its test.
//
// A signal warns the holder; it does not stop a write already on its way.
// [Lease.Token], the resourceVersion of the write that gave the Lease to the
// holder, is the fencing token a resource checks to refuse a holder that
// lost its lease (see ADR 0001, "a lease is not a fencing token", in the
// repository's docs/adr).
package k8slease
