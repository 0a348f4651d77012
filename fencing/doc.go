// Package fencing gives the resource a lease protects the check that makes
// the lease safe: the resource keeps the highest fencing token it accepted
// and refuses a write that carries a lower one, in the same atomic step as
// the write.
//
// A lease warns its holder; it cannot stop a holder that was paused past
// its lease (a GC pause, a stopped process, a request held in the network)
// from writing once it resumes. A lease's token
// ([github.com/zukhruf/lease.Lease].Token) grows with each holder of a
// subject, so a store that compares it with the highest one it has seen
// refuses the late write of an old holder:
//
//   - [SQL] raises a fence row in the caller's transaction, in one
//     statement, so that the transaction's writes commit with the fence or
//     not at all.
//   - [Memory] fences the resources of one process: [Memory.Do] runs a
//     write under the fence.
//   - [Transport] carries the token of a request's context in the
//     Fencing-Token header, and [Handler] refuses a stale request with
//     409 Conflict before it reaches the handler that writes.
//
// A refused write returns an error that wraps a *[StaleError], matched by
// errors.Is(err, [ErrStale]): the write was certainly not applied.
//
// Right after Lock, a new holder raises the fence without a payload
// ([SQL.Advance], [Memory.Advance]): from then on the writes of every older
// holder are refused, even if the new holder has nothing to write yet.
//
// The check and the write must be one atomic step at the resource: a fence
// read, compared, then written in a second step lets an old holder's write
// land after a newer one's. A fence cannot tell a forged token from a real
// one, and a store without an ordered compare or a conditional write
// cannot be fenced by this package.
package fencing
