// Package signal defines Signal, the holder's side of a lease: the one way to
// learn that the right to act for a subject was lost.
//
// A holder checks [Signal.Err] before each write, waits on [Signal.Done] in a
// select, hands [Signal.Context] to every call that takes a context, and
// registers clean-up with [Signal.AfterLoss]. Nothing reachable from a Signal
// can lose or end it, and no conversion that compiles without package unsafe
// turns a *Signal into a controller.Controller: that power stays with the
// issuer, as an AbortSignal's stays with its AbortController.
//
// A signal is lost at most once, with a [*github.com/zukhruf/lease/lost.Error]
// that names the subject and carries the issuer's cause. A release by the
// holder (the controller's End) never loses it, and a loss the issuer reports
// after the release does not reach the holder. A signal has no timer: it lasts as long as the
// issuer's session, and says nothing about time.
//
// A signal warns; it does not protect a resource. Code that must reject the
// writes of a holder that lost its lease needs a fencing token as well.
package signal

import (
	"context"
	"unsafe"

	"github.com/zukhruf/lease/internal/core"
)

// Signal is the holder's view of a lease. It reports the loss of the lease
// and nothing else; only the controller.Controller that issued it can lose
// or end it.
//
// A Signal and the controller.Controller that issued it share one state
// machine, at one address: the controller hands out a pointer into itself,
// without allocating. Go does not convert between the two types (each is a
// struct with an unexported field), so a holder cannot turn its *Signal into
// anything that loses or ends the lease.
//
// The zero Signal is a live lease on an empty subject that is never lost,
// since no controller holds it: its Err is always nil and its Done never
// closes. A nil *Signal is not valid; its methods panic.
//
// A Signal must not be copied after first use; use the *Signal that
// controller.Controller.Signal returns.
//
// In the terminology of [the Go memory model], a call to Lose that wins
// “synchronizes before” every Err that returns its error, every receive from
// Done that returns because of it, and every AfterLoss callback it starts.
//
// [the Go memory model]: https://go.dev/ref/mem
type Signal struct {
	l core.Lease // the only field, so that a *Signal and its *core.Lease are one address
}

// The conversions of fromLease and of package controller need a Signal to be
// laid out as its Lease: the constant index below is out of range, and the
// package does not compile, if Signal grows.
var _ = [1]struct{}{}[unsafe.Sizeof(Signal{})-unsafe.Sizeof(core.Lease{})]

func (s *Signal) lease() *core.Lease { return &s.l }

// fromLease returns the Signal whose Lease is l. Every Lease a Signal views
// was made as a Lease (by core.New or core.Any), and a Signal is a Lease and
// nothing more, so the conversion keeps its memory layout.
func fromLease(l *core.Lease) *Signal { return (*Signal)(unsafe.Pointer(l)) }

// Err returns nil while the lease is held and after the holder released it,
// and the *lost.Error of the loss once the lease is lost. Successive calls
// after a loss return the same error value.
//
// Err is made to be called before every write: while the lease is held it is
// one atomic load, inlined into the caller, and it never allocates, not even
// when it meets a loss under way and waits for it to complete. Once Err
// returns an error, the channel of Done is closed; once Done is closed, Err
// returns the error.
func (s *Signal) Err() error { return s.l.Err() }

// Done returns a channel that is closed when the lease is lost. A release
// never closes it. Successive calls to Done return the same value.
//
// The channel is made on the first call, so a signal that is never waited on
// costs no channel. After a loss with no earlier call, Done returns a shared
// closed channel.
func (s *Signal) Done() <-chan struct{} { return s.l.Done() }

// AfterLoss arranges to call f in its own goroutine after the lease is lost,
// exactly as [context.AfterFunc] does for a context. If the lease is already
// lost, AfterLoss calls f at once in its own goroutine. If the lease was
// released (or is released later, before a loss), f is never called and the
// registration, with f, is dropped.
//
// Lose never waits for f. A panic in f is not recovered: like a panic in a
// context.AfterFunc callback, it ends the program.
//
// Calling the returned stop func stops the association of s with f. It
// returns true if the call stopped f from being run, and false if f has
// been started or is about to be (the lease is lost), or the lease was
// released. stop does not wait for f
// to complete. Calling stop again returns false.
//
// AfterLoss panics if f is nil.
func (s *Signal) AfterLoss(f func()) (stop func() bool) {
	if f == nil {
		panic("signal: AfterLoss called with a nil func")
	}
	return s.lease().AfterLoss(f)
}

// Context returns a copy of parent that is done when parent is done or when
// the lease is lost, whichever happens first. On a loss, the context's Err
// is [context.Canceled] and [context.Cause] returns the *lost.Error. A
// release, or a loss the issuer reports after the release, never cancels it.
// The context is cancelled just after Err and Done show the loss, before the
// issuer's Lose returns, or, for a Context call that races the loss, before
// that call returns.
//
// Context is how a holder gives its lease to every call that takes a
// context: a request made with it is cut when the lease is lost.
//
// When parent was made by package context (or is Background), the context
// starts no goroutine while it and the lease live; like [context.WithCancel],
// it may start one to watch a parent of another type. As with
// context.WithCancel, call cancel as soon as the work done under the context
// is complete: canceling it removes its registration from the signal.
//
// The memory a live signal holds stays bounded by the contexts made from it
// that are live, even when a holder forgets cancel. A context made from a
// parent other than Background or TODO is registered on the signal; once its
// parent has ended, a later call to Context takes it off: when the
// registrations reach a limit, the call drops those whose context is done
// and sets the limit to twice the rest. So a signal keeps at most twice as
// many such registrations as the most contexts made from it that were live
// at once, and a call to Context looks at two of them on average; the call
// that drops them looks at all of them. A context whose parent never ends is
// live, and is kept until its cancel, the loss or the release. Once calls
// from several cores contend, the signal spreads its registrations over one
// part per core, each bounded so; with S parts and at most L contexts live
// at once it keeps at most S×(2L+1) (docs/design.md argues both bounds).
//
// A context made from Background or TODO is a child of one of the signal's
// own contexts (one per core once such calls come from several cores), as
// [context.WithCancel] makes one, and costs what that costs. If its cancel
// is forgotten, the signal keeps it (124 bytes) until the loss or the
// release, as a context keeps a child whose cancel was forgotten until the
// parent ends.
//
// Context panics if parent is nil.
func (s *Signal) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	if parent == nil {
		panic("signal: Context called with a nil parent")
	}
	return s.lease().WithCancel(parent)
}

// String returns the subject and the state of the signal, for logs:
// signal.Signal("orders", live).
func (s *Signal) String() string { return s.lease().String("signal.Signal") }
