// Package leasetest checks a [lease.Locker] against the promise every issuer
// of this repository keeps, and gives users an in-memory Locker for their own
// tests.
//
// [Run] is the conformance suite: given a [Harness] on a real coordinator, it
// checks mutual exclusion between independent clients, strictly growing
// tokens, a release that never loses the signal and lets a waiter in, a
// revocation that loses it with a [lost.Error] naming the subject, a waiting
// Lock cut by its context that leaves nothing held, Unlock twice, Lock after
// Unlock, TryLock, subjects at the edges, and no goroutine left behind.
//
// [Memory] is a Locker with mutual exclusion in the process, tokens, waiting,
// and the controls a test of a holder's loss path needs, with no server.
//
// [lost.Error]: https://pkg.go.dev/github.com/zukhruf/lease/lost#Error
package leasetest
