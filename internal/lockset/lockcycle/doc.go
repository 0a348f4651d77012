// Package lockcycle measures the lock cycle of a [lease.Locker]: Lock then
// Unlock of a free subject from one goroutine, the same from many at once,
// and the hand-over of a held subject to a waiter, so that every issuer of
// this repository and its peers are measured by one function, in one run,
// into one table.
//
// It is the engine of "lockset cycle" (make bench-lock); the lockers it
// measures, and the servers they talk to, are the caller's.
package lockcycle
