package singleflight

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zukhruf/lease/internal/core"
)

// flightContext is the context fn gets: a copy of parent that is done when
// parent is done, when the flight's lease is lost, or once fn has returned,
// as sig.Context(parent) would be. It is made by context.WithCancelCause
// when fn first asks it for Done, Value, or an Err that is not nil, and is
// cancelled by the flight itself, which alone can lose its lease (Forget)
// or see fn return, rather than through a registration on the lease: fn's
// context costs what context.WithCancelCause costs (3 allocations with its
// Done channel), so that a flight whose fn uses it costs 4, as x/sync's
// flight and a context.WithCancel of its own do. A flight whose fn never
// looks at its context (the common cache fill, whose loader takes no
// context) costs no context at all.
//
// Every method answers as the made context would: once made, they are its
// own; before, Err returns nil only while parent and the lease are live and
// fn has not returned, and Deadline is parent's, which WithCancelCause
// keeps. Because Done and Value are the made context's, context.Cause finds
// the loss, and context.WithCancel or context.AfterFunc over a flightContext
// join the made context's children without a goroutine.
type flightContext struct {
	// lease is the flight's lease, granted when the flight starts: a
	// core.Lease, which package signal views as a signal.Signal (see
	// call.sig). It lives here, so that the context finds it without a
	// pointer of its own.
	lease  core.Lease
	parent context.Context

	// made is set once ctx and cancel are, which never change again.
	// Whether fn has returned is the lease's state: the flight ends its
	// lease when fn returns, and nothing else ends it.
	made atomic.Bool

	mu     sync.Mutex // guards the making of ctx
	ctx    context.Context
	cancel context.CancelCauseFunc
}

var _ context.Context = (*flightContext)(nil)

// get returns the context, made on the first call.
func (c *flightContext) get() context.Context {
	if c.made.Load() {
		return c.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithCancelCause(c.parent)
		c.made.Store(true)
		// After made, as lose and finish look at made after the loss or
		// the end of the lease: one of each pair sees the other's move
		// and cancels (twice does no harm, the first cause stays).
		if err := c.lease.Err(); err != nil {
			c.cancel(err) // made by fn after its flight was forgotten
		} else if c.lease.Ended() {
			c.cancel(context.Canceled) // asked for by a goroutine that outlived fn
		}
	}
	return c.ctx
}

// lose cancels the context, if it was made, with err, the loss of the
// flight's lease; a context made later is cancelled as made.
func (c *flightContext) lose(err error) {
	if c.made.Load() {
		c.cancel(err)
	}
}

// finish cancels the context, if it was made, once fn has returned and the
// lease is ended or lost, so that it leaves parent's children; a context
// made later is cancelled as made. A flight forgotten before fn returned
// keeps the loss as the cause, even where finish comes before Forget
// cancels.
func (c *flightContext) finish() {
	if c.made.Load() {
		if err := c.lease.Err(); err != nil {
			c.cancel(err)
		} else {
			c.cancel(context.Canceled)
		}
	}
}

func (c *flightContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }

func (c *flightContext) Done() <-chan struct{} { return c.get().Done() }

func (c *flightContext) Err() error {
	if c.made.Load() {
		return c.ctx.Err()
	}
	// The lease and parent only ever turn from live to over, so two live
	// answers mean that both were live at the first of them.
	if c.lease.Live() && c.parent.Err() == nil {
		return nil
	}
	return c.get().Err()
}

func (c *flightContext) Value(key any) any { return c.get().Value(key) }

// String names the context as context's own types do, for logs.
func (c *flightContext) String() string {
	return "singleflight.flightContext(" + c.lease.String("signal.Signal") + ")"
}
