package singleflight_test

import (
	"context"
	"testing"

	"github.com/zukhruf/lease/docs/examples/singleflight"
	"github.com/zukhruf/lease/signal"
)

// TestAllocs pins what a flight costs when fn does not make its context:
// the flight and its lease's Controller, one allocation more than x/sync's
// flight (the bench module's TestAllocsBesideXSync sets the two side by side).
// A fn that makes its context pays what signal.Signal.Context costs on top.
func TestAllocs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		fn   func(context.Context, *signal.Signal) (int, error)
		want float64
	}{
		{"fn ignores ctx and sig", func(context.Context, *signal.Signal) (int, error) { return 1, nil }, 2},
		{"fn checks sig.Err", func(_ context.Context, sig *signal.Signal) (int, error) { return 1, sig.Err() }, 2},
		{"fn checks ctx.Err", func(ctx context.Context, _ *signal.Signal) (int, error) { return 1, ctx.Err() }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g singleflight.Group[int]
			g.Do(ctx, "key", tc.fn) // makes the Group's map
			if got := testing.AllocsPerRun(1000, func() { g.Do(ctx, "key", tc.fn) }); got != tc.want {
				t.Errorf("Do of a new flight: %v allocations, want %v", got, tc.want)
			}
		})
	}
}
