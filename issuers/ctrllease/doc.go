// Package ctrllease runs the leader-only work of a controller-runtime
// Manager under a [k8slease.Lease]: the work of a term is cut before
// another replica may lead, the Lease is released only after that work
// returned, and a replica that lost the Lease campaigns again without
// leaving the process.
//
// A Manager made with LeaderElection true runs its leader-only work on the
// Manager's own context: when the election is lost, reconciles still
// running keep writing while the next leader starts, and the process is
// expected to exit. ctrllease replaces that election. The Manager is made
// with LeaderElection false, and [Add] registers on it one runnable, the
// [Elector], which for as long as the Manager runs:
//
//  1. campaigns for the Lease with [k8slease.Config.Lock];
//  2. when granted, calls the [Setup] with a Manager of the term and the
//     term's lease: setup registers the term's controllers
//     (ctrl.NewControllerManagedBy(m)...Complete(r)) and runnables (m.Add);
//  3. starts all of them with the term's context, which is the lease's
//     (lease.Signal().Context): it is done at the lease's deadline, or at
//     once when the Lease is taken over or deleted, with [context.Cause] the
//     *lost.Error that says why; every Reconcile of the term gets a context
//     made from it;
//  4. when the lease is lost, or the Manager stops, waits for all of the
//     term's work to return; then unlocks the Lease (so that a waiting
//     replica is granted within a round trip) and, after a loss, campaigns
//     again from step 1.
//
// # The term model
//
// Each term is built afresh by setup: new controllers, new reconcilers, new
// queues. What lives across terms is the Manager's: its cache (informers
// stay warm between terms, so a new term does not list the world again),
// its clients, scheme and REST mapper, its webhook, metrics and health
// servers, and the runnables added to it directly, which run whether or not
// this replica leads. Setup may call, on the Manager it is given, Add and
// everything the controller builder calls; everything else the Manager owns
// (webhooks, health checks, field indexes, metrics handlers) is registered
// on the Manager before it starts, once, not by setup: the term's field
// indexer refuses, and its webhook server's Register panics, naming the
// call.
//
// The term's Manager differs from the Manager in these ways: its Add
// registers the work of the term only, and guards the reconciler of a
// controller on reconcile.Request so that a Reconcile a worker calls after
// the term ended returns at once; its GetClient returns the Manager's
// client gated as by [GateClient], and by the lease's deadline as well
// ([k8slease.Lease.Deadline], read before each write, so that a process
// paused past its deadline refuses a write before the lease's timer has
// run): a write made after the loss fails without a request; its cache removes, at the end of the term, every event
// handler the term's controllers put on the shared informers; and the
// controllers built on it skip controller-runtime's check that controller
// names are unique in the process, since each term builds its controllers
// again under the same names.
//
// # Stopping
//
// When the Manager's context ends (SIGTERM in a pod), the term's context
// is done at once, and the lease goes on being renewed while the work
// returns, for at most [Options.StopTimeout]. Work that returns within it
// is followed by the release. Work that has not returned by then is never
// unlocked under: the renewals stop ([k8slease.Lease.StopRenewing]), the
// lease runs out at its deadline, and the next replica is granted only when
// the record expires, as a crashed replica's; the Elector's Start, and so
// the Manager, reports an error naming what did not return
// ([Elector.Err] keeps it). ctrllease never exits the process.
//
// # Fencing
//
// The lease warns; it does not protect a resource. The term's lease carries
// a fencing token, [k8slease.Lease.Token], larger for every later term of
// every replica: a reconciler that writes to another system passes it along,
// and that system refuses a token smaller than the largest it accepted.
package ctrllease
