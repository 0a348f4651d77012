// Package controller defines Controller, the issuer's side of a lease: it
// hands the holder a [signal.Signal] and alone can lose or end it.
//
// An issuer (a mutex, an election, an adapter over a coordinator such as
// etcd) makes a Controller with [New] when it grants a lease, gives the
// holder [Controller.Signal], calls [Controller.Lose] when it learns the
// holder lost the right, and [Controller.End] when the holder releases it.
package controller

import (
	"unsafe"

	"github.com/zukhruf/lease/internal/core"
	"github.com/zukhruf/lease/signal"
)

// Controller is the issuer's handle on one lease. It is live when made; Lose
// and End each move it, once, to its final state: lost or ended.
//
// A Controller holds its [signal.Signal]: [Controller.Signal] returns a
// pointer into the Controller, without allocating. Go does not convert a
// *signal.Signal into a *Controller (each is a struct with an unexported
// field), so the holder cannot lose or end its own lease.
//
// The zero Controller is a live lease on an empty subject, ready to use. A
// nil *Controller is not valid; its methods panic. A Controller must not be
// copied after first use.
//
// In the terminology of [the Go memory model], a call to Lose that wins
// “synchronizes before” every Err that returns its error, every receive from
// Done that returns because of it, and every AfterLoss callback it starts.
//
// [the Go memory model]: https://go.dev/ref/mem
type Controller struct {
	s signal.Signal // the only field: a Controller is laid out as its Signal, and so as its Lease
}

// lease and New convert between a *Controller and the *core.Lease it is laid
// out as; the constant index below is out of range, and the package does not
// compile, if Controller grows.
var _ = [1]struct{}{}[unsafe.Sizeof(Controller{})-unsafe.Sizeof(core.Lease{})]

// New returns a live lease on subject, such as a lock's key or an election's
// name. The subject is only reported, in [*github.com/zukhruf/lease/lost.Error] and String; the empty
// subject is allowed and gives the same lease as the zero Controller.
//
// New, Signal and End together make one allocation.
func New(subject string) *Controller { return (*Controller)(unsafe.Pointer(core.New(subject))) }

// A holder that imports only this package reaches Signal.Err and Signal.Done
// through Controller.Signal. The compiler re-exports an imported method's
// body with a package, so that its importers can inline it, only when that
// package inlined the method somewhere itself (exportBody in
// cmd/compile/internal/noder). This is that somewhere; the inlining check in
// bench/inline_test.go fails without it.
var _ = func(s *signal.Signal) (<-chan struct{}, error) { return s.Done(), s.Err() }

// lease returns the state machine c is laid out as. Package signal keeps its
// own field to itself, so the conversion goes through the address.
func (c *Controller) lease() *core.Lease { return (*core.Lease)(unsafe.Pointer(&c.s)) }

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (c *Controller) Signal() *signal.Signal {
	if c == nil {
		// Without this, the conversion would hand the holder a nil signal
		// and the panic would come later, far from the mistake.
		panic("controller: Signal called on a nil *Controller")
	}
	return &c.s
}

// Subject returns the subject given to New.
func (c *Controller) Subject() string { return c.lease().Subject() }

// Lose loses a live lease: the signal's Err returns a *lost.Error with the
// subject and cause, Done is closed, contexts made by the signal's Context
// are cancelled, and AfterLoss callbacks are started. cause may be nil; then
// the error's Unwrap returns nil.
//
// Lose reports whether this call lost the lease. A lease is lost once: a
// later Lose returns false and keeps the first reason, the same error value.
// After End, Lose returns false and changes nothing, so a loss the issuer
// sees after the holder released the lease never reaches the holder.
//
// A loss is not atomic across the views of the lease. The signal's Err and
// Done show it first; Lose then cancels each context made by the signal's
// Context and loses each merged signal from signal.Any registered on it, one
// after the other, so for a moment a holder may see its signal lost while a
// context made from it is not yet cancelled. Lose returns only once every
// one of them is cancelled or lost and every AfterLoss callback is started;
// it never waits for the callbacks themselves. (A context, merged signal or
// callback registered while the loss is under way may be handled instead by
// the call that registers it, before that call returns.) A Lose that returns
// false finds the loss complete in Err and Done, but may return before the
// winning Lose has cancelled and started all that.
//
// Lose takes no lock before Err and Done show the loss, so nothing a holder
// does with its signal meanwhile (registering a callback or a context,
// stopping or cancelling one) delays it.
func (c *Controller) Lose(cause error) bool { return c.lease().Lose(cause) }

// End records that the holder released the lease. It never loses the signal:
// Err stays nil, Done never closes, and AfterLoss callbacks are dropped
// without running. End reports whether this call ended a live lease; after a
// loss it returns false and keeps the loss, and a second End returns false.
func (c *Controller) End() bool { return c.lease().End() }

// String returns the subject and the state of the lease, for logs:
// controller.Controller("orders", lost: the coordinator refused the claim).
func (c *Controller) String() string { return c.lease().String("controller.Controller") }
