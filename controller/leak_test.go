package controller_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/zukhruf/lease/controller"
)

// payload stands for whatever a callback or a context holds on to.
type payload [256]byte

type ctxKey struct{}

// collected runs GCs until the weak pointer is cleared, bounded by
// hangGuard: a release that happens in another goroutine (that of
// context.AfterFunc) may take a few rounds.
func collected[T any](p weak.Pointer[T]) bool {
	deadline := time.Now().Add(hangGuard)
	for time.Now().Before(deadline) {
		runtime.GC()
		if p.Value() == nil {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// TestCollectable checks that what a lease no longer needs can be collected
// while the lease, and whatever the holder rightly keeps, stays reachable.
// Each case makes its registration in a function of its own, so that
// nothing on the test's stack refers to the payload; it returns what the
// holder and issuer keep.
func TestCollectable(t *testing.T) {
	tests := []struct {
		name string
		// setup returns a weak pointer to the payload, and what stays
		// reachable until the check is done.
		setup func(t *testing.T) (weak.Pointer[payload], []any)
	}{
		{
			name: "AfterLoss callback after End",
			setup: func(t *testing.T) (weak.Pointer[payload], []any) {
				c := controller.New("orders")
				p := new(payload)
				stop := c.Signal().AfterLoss(func() { p[0]++ })
				c.End()
				return weak.Make(p), []any{c, stop}
			},
		},
		{
			name: "AfterLoss callback after stop",
			setup: func(t *testing.T) (weak.Pointer[payload], []any) {
				c := controller.New("orders")
				p := new(payload)
				stop := c.Signal().AfterLoss(func() { p[0]++ })
				if !stop() {
					t.Fatal("stop() = false on a live lease, want true")
				}
				return weak.Make(p), []any{c, stop}
			},
		},
		{
			name: "AfterLoss callback after it ran",
			setup: func(t *testing.T) (weak.Pointer[payload], []any) {
				c := controller.New("orders")
				p := new(payload)
				ran := make(chan struct{})
				stop := c.Signal().AfterLoss(func() { p[0]++; close(ran) })
				c.Lose(nil)
				<-ran
				return weak.Make(p), []any{c, stop}
			},
		},
		{
			name: "Context after its cancel",
			setup: func(t *testing.T) (weak.Pointer[payload], []any) {
				c := controller.New("orders")
				parent, cancelParent := context.WithCancel(context.Background())
				p := new(payload)
				_, cancel := c.Signal().Context(context.WithValue(parent, ctxKey{}, p))
				cancel()
				return weak.Make(p), []any{c, parent, cancelParent}
			},
		},
		{
			// The lease takes a context whose parent ended off when a later
			// Context compacts the registrations (TestContextPatternsHeapFlat
			// in package signal streams a million in each pattern).
			name: "Context after its parent is cancelled, once another Context compacted it",
			setup: func(t *testing.T) (weak.Pointer[payload], []any) {
				c := controller.New("orders")
				parent, cancelParent := context.WithCancel(context.Background())
				p := new(payload)
				ctx, cancel := c.Signal().Context(context.WithValue(parent, ctxKey{}, p))
				cancelParent()
				<-ctx.Done()
				_ = cancel // not called: the parent's end must be enough
				other, cancelOther := context.WithCancel(context.Background())
				_, cancel2 := c.Signal().Context(other)
				return weak.Make(p), []any{c, parent, cancelOther, cancel2}
			},
		},
		{
			name: "Context after the loss, its parent live",
			setup: func(t *testing.T) (weak.Pointer[payload], []any) {
				c := controller.New("orders")
				parent, cancelParent := context.WithCancel(context.Background())
				p := new(payload)
				ctx, cancel := c.Signal().Context(context.WithValue(parent, ctxKey{}, p))
				c.Lose(nil)
				<-ctx.Done()
				// Not called: like a context.WithCancel child cancelled by
				// its parent, a context the loss cancelled is done and
				// must not stay registered anywhere.
				_ = cancel
				return weak.Make(p), []any{c, parent, cancelParent}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, keep := tt.setup(t)
			if !collected(p) {
				t.Errorf("the payload is still reachable")
			}
			runtime.KeepAlive(keep)
		})
	}
}

// TestLeaseCollectable checks that a lost or ended lease that nobody refers
// to any more is collected, with all it made: the Done channel, callbacks,
// contexts.
func TestLeaseCollectable(t *testing.T) {
	tests := []struct {
		name   string
		finish func(*controller.Controller)
	}{
		{"lost", func(c *controller.Controller) { c.Lose(errSoak) }},
		{"ended", func(c *controller.Controller) { c.End() }},
		{"ended after the loss", func(c *controller.Controller) { c.Lose(nil); c.End() }},
	}
	for _, spread := range []bool{false, true} {
		for _, tt := range tests {
			name := tt.name
			if spread {
				name += ", spread registry"
			}
			t.Run(name, func(t *testing.T) {
				parent, cancelParent := context.WithCancel(context.Background())
				defer cancelParent()
				p := useLease(tt.finish, parent, spread)
				if !collected(p) {
					t.Errorf("the %s lease is still reachable", name)
				}
				runtime.KeepAlive(parent)
			})
		}
	}
}

// useLease uses a lease every way a holder can and finishes it. It cancels
// the context made from parent, as a holder must, but neither stops its
// callback nor cancels its context made from context.Background, since
// a finished lease must not need that. It returns a weak pointer to the
// lease. With spread, the registry has its set of shards first, as after
// contention.
func useLease(finish func(*controller.Controller), parent context.Context, spread bool) weak.Pointer[controller.Controller] {
	c := controller.New("orders")
	if spread {
		controller.Spread(c)
	}
	sig := c.Signal()
	sig.Done()
	ran := make(chan struct{})
	sig.AfterLoss(func() { close(ran) })
	_, cancel := sig.Context(parent)
	sig.Context(context.Background())
	finish(c)
	if sig.Err() != nil {
		<-ran
	}
	cancel()
	return weak.Make(c)
}

// A holder that never cancels a context made from a long-lived parent keeps
// that context alive, as with context.WithCancel; once the lease has ended,
// the parent must not keep the lease too.
func TestEndedLeaseNotKeptByParent(t *testing.T) {
	for _, spread := range []bool{false, true} {
		parent, cancelParent := context.WithCancel(context.Background())
		p := func() weak.Pointer[controller.Controller] {
			c := controller.New("orders")
			if spread {
				controller.Spread(c)
			}
			ctx, _ := c.Signal().Context(parent) // the cancel func is dropped on purpose
			c.End()
			if ctx.Err() != nil {
				t.Errorf("ctx.Err() = %v after End, want nil", ctx.Err())
			}
			return weak.Make(c)
		}()
		if !collected(p) {
			t.Errorf("the ended lease (spread registry: %v) is still reachable from the parent of a context made from it", spread)
		}
		runtime.KeepAlive(parent)
		cancelParent()
	}
}
