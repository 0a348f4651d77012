package singleflight

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zukhruf/lease/signal"
)

// flightContext is the context fn gets: sig.Context(parent), made when fn
// first asks it for Done, Value, or an Err that is not nil. A flight whose fn
// never looks at its context (the common cache fill, whose loader takes no
// context) so costs no context and no registration on its lease: the lease
// adds one allocation to a flight, the Controller.
//
// Every method answers as the context made by sig.Context(parent) would:
// once made, they are that context's own; before, Err returns nil only while
// parent and the lease are live and fn has not returned, and Deadline is
// parent's, which sig.Context keeps. Because Done and Value are the made
// context's, context.Cause finds the loss, and context.WithCancel or
// context.AfterFunc over a flightContext join the made context's children
// without a goroutine.
type flightContext struct {
	parent context.Context
	sig    *signal.Signal

	made     atomic.Bool // ctx and cancel are set and never change again
	finished atomic.Bool // fn has returned

	mu     sync.Mutex // guards the making of ctx
	ctx    context.Context
	cancel context.CancelFunc
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
		c.ctx, c.cancel = c.sig.Context(c.parent)
		c.made.Store(true)
		// After made, as finish reads finished before made: one of the
		// two sees the other's store and cancels (twice does no harm).
		if c.finished.Load() {
			c.cancel() // asked for by a goroutine that outlived fn
		}
	}
	return c.ctx
}

// finish cancels the context, if it was made, once fn has returned, so that
// it leaves parent's children; a context made later is cancelled as made.
func (c *flightContext) finish() {
	c.finished.Store(true)
	if c.made.Load() {
		c.cancel()
	}
}

func (c *flightContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }

func (c *flightContext) Done() <-chan struct{} { return c.get().Done() }

func (c *flightContext) Err() error {
	if c.made.Load() {
		return c.ctx.Err()
	}
	// Each of the three only ever turns from live to over, so three live
	// answers mean that all three were live at the first of them.
	if !c.finished.Load() && c.sig.Err() == nil && c.parent.Err() == nil {
		return nil
	}
	return c.get().Err()
}

func (c *flightContext) Value(key any) any { return c.get().Value(key) }

// String names the context as context's own types do, for logs.
func (c *flightContext) String() string {
	return "singleflight.flightContext(" + c.sig.String() + ")"
}
