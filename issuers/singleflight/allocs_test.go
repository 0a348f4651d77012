package singleflight_test

import (
	"context"
	"testing"

	"github.com/zukhruf/lease/issuers/singleflight"
	"github.com/zukhruf/lease/signal"
)

// TestAllocs pins what a flight costs: one allocation, the flight with its
// lease in it, as x/sync's flight (the bench module's TestAllocsBesideXSync
// sets the two side by side). A fn that uses its context pays what
// context.WithCancelCause of the caller's context and its Done channel cost,
// 3, so 4 in all: what x/sync's flight and a context.WithCancel of fn's own
// cost, with the caller's context Background or a live one.
func TestAllocs(t *testing.T) {
	live, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		fn   func(context.Context, *signal.Signal) (int, error)
		want float64
	}{
		{"fn ignores ctx and sig", context.Background(), func(context.Context, *signal.Signal) (int, error) { return 1, nil }, 1},
		{"fn checks sig.Err", context.Background(), func(_ context.Context, sig *signal.Signal) (int, error) { return 1, sig.Err() }, 1},
		{"fn checks ctx.Err", context.Background(), func(ctx context.Context, _ *signal.Signal) (int, error) { return 1, ctx.Err() }, 1},
		{"fn waits on ctx.Done, Background caller", context.Background(), useDone, 4},
		{"fn waits on ctx.Done, live caller", live, useDone, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g singleflight.Group[int]
			g.Do(tc.ctx, "key", tc.fn) // makes the Group's map, and the live parent's children
			if got := testing.AllocsPerRun(1000, func() { g.Do(tc.ctx, "key", tc.fn) }); got != tc.want {
				t.Errorf("Do of a new flight: %v allocations, want %v", got, tc.want)
			}
		})
	}
}

// useDone is a fn that uses its context as a call made with it does: it
// selects on Done.
func useDone(ctx context.Context, _ *signal.Signal) (int, error) {
	select {
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	default:
		return 1, nil
	}
}

// TestAllocsWaiters pins what the callers that join a flight cost: nothing
// for callers of Do, as with x/sync, and for callers of DoChan what x/sync's
// cost too, their channels (two allocations each: a channel of a type with
// pointers has its buffer apart) and the growth of the flight's slice of
// them. The callers of Do are goroutines started once, outside the count,
// which join a new flight on each run.
func TestAllocsWaiters(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	flight := func(context.Context, *signal.Signal) (int, error) {
		<-release
		return 1, nil
	}
	for _, tc := range []struct {
		name   string
		doChan bool
		want   float64 // for 8 callers
	}{
		{"Do", false, 0},
		{"DoChan", true, 8*2 + 4}, // the slice grows from 1 to 2, 4, 8 and 16
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g singleflight.Group[int]
			const waiters = 8
			join, joined := make(chan struct{}), make(chan struct{})
			for range waiters {
				go func() {
					for range join {
						g.Do(ctx, "key", flight)
						joined <- struct{}{}
					}
				}()
			}
			defer close(join)
			chans := make([]<-chan singleflight.Result[int], 0, waiters)
			run := func(n int) func() {
				return func() {
					ch := g.DoChan(ctx, "key", flight)
					for range n {
						if tc.doChan {
							chans = append(chans, g.DoChan(ctx, "key", flight))
						} else {
							join <- struct{}{}
						}
					}
					waitDups(t, &g, "key", n)
					release <- struct{}{}
					<-ch
					for i := range n {
						if tc.doChan {
							<-chans[i]
						} else {
							<-joined
						}
					}
					chans = chans[:0]
				}
			}
			alone := testing.AllocsPerRun(200, run(0))
			shared := testing.AllocsPerRun(200, run(waiters))
			if got := shared - alone; got != tc.want {
				t.Errorf("a flight alone: %v allocations; with %d callers joined: %v, %v more, want %v more",
					alone, waiters, shared, got, tc.want)
			}
		})
	}
}
