// Package core holds the state machine behind a lease. Package signal gives the
// holder a read-only view of it and package controller the power to lose or end
// it; see the note on [Lease] for how they share it.
package core

import (
	"context"
	"strconv"
	"sync"
	"unsafe"

	"github.com/zukhruf/lease/lost"
)

// Lease is the state machine of one lease: live, then lost with a reason or
// ended, once.
//
// signal.Signal is a struct whose only field is a Lease, and
// controller.Controller a struct whose only field is a Signal, so the three
// share one address and one allocation: Controller.Signal returns a pointer
// into the Controller. Go converts between neither pointer type (their
// unexported fields make the structs distinct), so a holder cannot turn its
// *signal.Signal into anything that loses or ends it; package controller
// reaches the Lease through package unsafe, which a compile-time size check
// in each package keeps valid.
//
// The zero Lease is live with an empty subject.
type Lease struct {
	_       noCopy
	state   stateWord
	mu      sync.Mutex // guards the fields below; writes of state and done happen under it
	subject string
	done    unsafe.Pointer // the Done channel once made; see Done
	err     *lost.Error    // set once, before state becomes lost
	waiters *waiter        // registrations to fire at the loss, newest first
}

// noCopy makes go vet's copylocks check report a copied Lease.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// A waiter is one registration: an AfterLoss callback or a derived context.
type waiter struct {
	lease      *Lease // set before the waiter is shared, never changed: stop reads it unlocked
	prev, next *waiter
	f          func()                  // AfterLoss: started in its own goroutine
	cancel     context.CancelCauseFunc // Context: called with the loss
	stopParent func() bool             // Context: takes the registration on the parent off; set before w is shared
	linked     bool
}

// unlink clears w's links and what it would call, so that a stop func the
// holder keeps does not keep the callback alive. It runs with the mutex held.
func (w *waiter) unlink() {
	w.prev, w.next, w.f, w.cancel, w.linked = nil, nil, nil, nil, false
}

// detach clears w's links and what it would call, and returns them. Lose and
// End call it without the mutex, on waiters they have taken off a lease that
// is no longer live: a concurrent stop sees the state and leaves them alone.
func (w *waiter) detach() (next *waiter, f func(), cancel context.CancelCauseFunc) {
	next, f, cancel = w.next, w.f, w.cancel
	w.prev, w.next, w.f, w.cancel = nil, nil, nil, nil
	return next, f, cancel
}

// stopParentRegistration takes a context's registration off its parent
// once the lease is lost or ended: it only served to take the context off
// the lease, and would otherwise keep the context and the lease for as long
// as the parent lives. It runs without the mutex, since it takes the
// parent's.
func (w *waiter) stopParentRegistration() {
	if w.stopParent != nil {
		w.stopParent()
	}
}

// closedchan is returned by Done when the lease was lost before anyone asked
// for the channel, so that such a loss makes no channel.
var closedchan = make(chan struct{})

func init() { close(closedchan) }

// New returns a live lease on subject.
func New(subject string) *Lease { return &Lease{subject: subject} }

// Subject returns what the lease gives the right to.
func (l *Lease) Subject() string { return l.subject }

// Err returns nil while the lease is live or ended, and the loss once it is lost.
// A receiver woken by the close of Done must find the error, and whoever
// finds the error must find Done closed (Go issue 75533 is this bug in
// context). Lose therefore passes through stateLosing while it closes Done,
// with the mutex held, and Err in that short window waits for the mutex.
// Only the live state is checked inline: it is the one a holder's loop sees
// on every write, and a second branch would push Err over the compiler's
// inlining budget. Lost and ended cost a call but take no lock.
func (l *Lease) Err() error {
	if l.state.load() != stateLive {
		return l.errNotLive()
	}
	return nil
}

func (l *Lease) errNotLive() error {
	switch l.state.load() {
	case stateLost:
		return l.err
	case stateLosing:
		// Lose holds the mutex until Done is closed and the state is lost.
		l.mu.Lock()
		l.mu.Unlock()
		return l.err
	}
	return nil
}

func (l *Lease) makeDone() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.loadDone(); c != nil {
		return c
	}
	if l.state.load() == stateLost {
		// Kept, so that later calls take the fast path.
		l.storeDone(closedchan)
		return closedchan
	}
	c := make(chan struct{})
	l.storeDone(c)
	return c
}

// Lose loses a live lease with cause and reports whether this call lost it.
func (l *Lease) Lose(cause error) bool { return l.lose(cause, nil) }

// lose loses a live lease with err, or when err is nil with a new error for
// the subject and cause, and reports whether this call lost it.
func (l *Lease) lose(cause error, err *lost.Error) bool {
	l.mu.Lock()
	if l.state.load() != stateLive {
		l.mu.Unlock()
		return false
	}
	if err == nil {
		err = lost.New(l.subject, cause)
	}
	l.err = err
	// Err reads the state without the mutex; see Err for why the state is
	// losing while Done is closed.
	l.state.store(stateLosing)
	if c := l.loadDone(); c != nil {
		close(c)
	}
	l.state.store(stateLost)
	w := l.waiters
	l.waiters = nil
	l.mu.Unlock()

	for w != nil {
		next, f, cancel := w.detach()
		if cancel != nil {
			cancel(err)
		} else {
			go f()
		}
		w.stopParentRegistration()
		w = next
	}
	return true
}

// End ends a live lease and reports whether this call ended it.
func (l *Lease) End() bool {
	l.mu.Lock()
	if l.state.load() != stateLive {
		l.mu.Unlock()
		return false
	}
	l.state.store(stateEnded)
	w := l.waiters
	l.waiters = nil
	l.mu.Unlock()

	// Drop every registration and what it holds, even where the holder
	// keeps its stop func: nothing can fire any more.
	for w != nil {
		next, _, _ := w.detach()
		w.stopParentRegistration()
		w = next
	}
	return true
}

// AfterLoss arranges for f to run in its own goroutine after the loss.
func (l *Lease) AfterLoss(f func()) (stop func() bool) {
	w := &waiter{lease: l, f: f}
	if !l.add(w) {
		if l.state.load() == stateLost {
			go f()
		}
		return stopped
	}
	return w.stop
}

// WithCancel returns a copy of parent that is cancelled with the loss as its
// cause.
func (l *Lease) WithCancel(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	if ctx.Err() != nil {
		// The parent has ended: nothing to register, and no AfterFunc
		// goroutine to start for nothing.
		return ctx, func() { cancel(context.Canceled) }
	}
	w := &waiter{lease: l, cancel: cancel}
	if parent.Done() != nil && l.state.load() == stateLive {
		// When the parent ends the context, the registration goes too, so a
		// long-lived lease does not keep dead contexts. For a parent made by
		// package context, the goroutine that context.AfterFunc starts runs
		// only then, never while both live.
		// It is set up before w is shared so that Lose finds it and takes it
		// off the parent.
		w.stopParent = context.AfterFunc(parent, func() { w.stop() })
	}
	if !l.add(w) {
		if w.stopParent != nil {
			w.stopParent()
		}
		if err := l.Err(); err != nil {
			cancel(err)
		}
		return ctx, func() { cancel(context.Canceled) }
	}
	if parent.Err() != nil {
		// The parent ended before w was linked, so its AfterFunc may have
		// found nothing to stop.
		w.stop()
	}
	stopParent := w.stopParent
	if stopParent == nil {
		stopParent = stopped
	}
	return ctx, func() {
		w.stop()
		stopParent()
		cancel(context.Canceled)
	}
}

// add links w in and reports true while the lease is live, or reports false.
func (l *Lease) add(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.load() != stateLive {
		return false
	}
	w.linked = true
	w.next = l.waiters
	if w.next != nil {
		w.next.prev = w
	}
	l.waiters = w
	return true
}

// stop unlinks w and reports whether this call kept it from firing.
func (w *waiter) stop() bool {
	l := w.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if !w.linked || l.state.load() != stateLive {
		return false
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.waiters = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.unlink()
	return true
}

func stopped() bool { return false }

// String returns kind, the subject and the state, for logs:
// signal.Signal("orders", lost: the coordinator refused the claim).
func (l *Lease) String(kind string) string {
	s := kind + "(" + strconv.Quote(l.subject)
	switch l.state.load() {
	case stateLosing, stateLost:
		if cause := l.err.Unwrap(); cause != nil {
			return s + ", lost: " + cause.Error() + ")"
		}
		return s + ", lost)"
	case stateEnded:
		return s + ", ended)"
	}
	return s + ", live)"
}
