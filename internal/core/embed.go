package core

import "github.com/zukhruf/lease/lost"

// The calls in this file serve an owner that keeps a Lease inside a larger
// struct of its own, in this module (the single-flight group of
// issuers/singleflight), so that the lease costs no allocation of its
// own.

// Init makes l, a zero Lease that no other goroutine can reach yet, a live
// lease on subject, as New makes one.
func (l *Lease) Init(subject string) { l.err = *lost.New(subject, nil) }

// LoseFirst loses a live lease as Lose does, and reports whether this call
// lost it, but leaves what is registered on the lease to FireLoss: when it
// returns, Err and Done show the loss, and contexts and callbacks
// registered before may not have been cancelled or started yet. It lets an
// owner move the state under a lock of its own and fire, which may take as
// long as there are contexts, after letting go of that lock. The owner must
// call FireLoss after a LoseFirst that returned true.
func (l *Lease) LoseFirst(cause error) bool {
	if !l.state.cas(stateLive, stateLosing) {
		l.awaitLosing()
		return false
	}
	l.markLost(cause)
	return true
}

// FireLoss cancels every context and starts every callback registered on a
// lease that LoseFirst lost, as Lose does before it returns.
func (l *Lease) FireLoss() { l.fireRegistry() }

// Live reports whether l is neither lost nor ended; Ended whether it was
// ended. Each is one atomic load, with the order of Lose's and End's moves.
func (l *Lease) Live() bool  { return l.state.load() == stateLive }
func (l *Lease) Ended() bool { return l.state.load() == stateEnded }
