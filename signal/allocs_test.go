package signal_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

// The costs a holder pays on its hot path are pinned here, the way context's
// TestAllocs pins its own: a change that makes a check allocate fails.

var errAllocs = errors.New("the coordinator refused the claim")

// leaseIn returns a signal in the given state: "live", "lost" or "ended".
// With warm, Done was called before the loss or the release.
func leaseIn(t *testing.T, state string, warm bool) *signal.Signal {
	t.Helper()
	c := controller.New("orders")
	if warm {
		c.Signal().Done()
	}
	switch state {
	case "live":
	case "lost":
		c.Lose(errAllocs)
	case "ended":
		c.End()
	default:
		t.Fatalf("unknown state %q", state)
	}
	return c.Signal()
}

func TestAllocsErrAndDone(t *testing.T) {
	tests := []struct {
		name  string
		state string
		warm  bool // Done was called before
		call  func(*signal.Signal)
		want  float64
	}{
		{"Err/live", "live", false, func(s *signal.Signal) { _ = s.Err() }, 0},
		{"Err/lost", "lost", false, func(s *signal.Signal) { _ = s.Err() }, 0},
		{"Err/ended", "ended", false, func(s *signal.Signal) { _ = s.Err() }, 0},
		{"Err/live/warm", "live", true, func(s *signal.Signal) { _ = s.Err() }, 0},
		{"Err/lost/warm", "lost", true, func(s *signal.Signal) { _ = s.Err() }, 0},
		{"Done/live/warm", "live", true, func(s *signal.Signal) { _ = s.Done() }, 0},
		{"Done/lost/warm", "lost", true, func(s *signal.Signal) { _ = s.Done() }, 0},
		{"Done/ended/warm", "ended", true, func(s *signal.Signal) { _ = s.Done() }, 0},
		// A loss before any call to Done makes no channel: Done returns a
		// shared closed one.
		{"Done/lost/cold", "lost", false, func(s *signal.Signal) { _ = s.Done() }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := leaseIn(t, tt.state, tt.warm)
			if got := testing.AllocsPerRun(1000, func() { tt.call(s) }); got != tt.want {
				t.Errorf("allocations = %v, want %v", got, tt.want)
			}
		})
	}
}

// The first Done on a live lease makes its channel, once: that is the one
// allocation a lease that is waited on adds.
func TestAllocsFirstDone(t *testing.T) {
	const runs = 100
	sigs := make([]*signal.Signal, runs+1) // AllocsPerRun calls once more to warm up
	for i := range sigs {
		sigs[i] = controller.New("orders").Signal()
	}
	i := 0
	got := testing.AllocsPerRun(runs, func() {
		_ = sigs[i].Done()
		i++
	})
	if got != 1 {
		t.Errorf("first Done on a live lease: %v allocations, want 1", got)
	}
}

// registries are the two shapes of a lease's registry that the allocation
// counts must hold on: its own shard alone, as until the first contention,
// and with the set of shards that contention adds.
var registries = []struct {
	name  string
	setup func(*signal.Signal)
}{
	{"own shard", func(*signal.Signal) {}},
	{"set of shards", signal.Spread},
}

// Registering a callback and stopping it costs the registration and the stop
// func; the goal is at most 2.
func TestAllocsAfterLoss(t *testing.T) {
	for _, r := range registries {
		t.Run(r.name, func(t *testing.T) {
			s := controller.New("orders").Signal()
			r.setup(s)
			f := func() { panic("called") }
			got := testing.AllocsPerRun(1000, func() {
				stop := s.AfterLoss(f)
				stop()
			})
			if got > 2 {
				t.Errorf("AfterLoss and stop: %v allocations, want at most 2", got)
			}
		})
	}
}

// A context made from a live lease with Background as its parent is a child
// of a lease context: it costs what context.WithCancel costs (the context
// and its cancel func), 2, as a context.WithCancel of a lease that is a
// context does. It starts no goroutine.
func TestAllocsContext(t *testing.T) {
	for _, r := range registries {
		t.Run(r.name, func(t *testing.T) {
			s := controller.New("orders").Signal()
			r.setup(s)
			got := testing.AllocsPerRun(1000, func() {
				_, cancel := s.Context(context.Background())
				cancel()
			})
			if got != 2 {
				t.Errorf("Context(Background) and cancel: %v allocations, want 2", got)
			}
		})
	}
}

// With a live parent, such as a request's context, the context costs what
// context.WithCancelCause of that parent costs, 2, and the cancel func that
// takes it off the lease: 3. The context way (context.WithCancelCause of the
// parent and context.AfterFunc on the lease's context) costs 6.
func TestAllocsContextLiveParent(t *testing.T) {
	for _, r := range registries {
		t.Run(r.name, func(t *testing.T) {
			s := controller.New("orders").Signal()
			r.setup(s)
			req, cancelReq := context.WithCancel(context.Background())
			defer cancelReq()
			got := testing.AllocsPerRun(1000, func() {
				_, cancel := s.Context(req)
				cancel()
			})
			if got != 3 {
				t.Errorf("Context(req) and cancel: %v allocations, want 3", got)
			}
			if n := signal.Registrations(s); n != 0 {
				t.Errorf("after every cancel, the signal keeps %d registrations, want 0", n)
			}
		})
	}
}

// TestSpreadShards: a new lease has no registry, and the set of shards that
// Spread adds to the registry has one shard per core at least, up to 64.
func TestSpreadShards(t *testing.T) {
	s := controller.New("orders").Signal()
	if n := signal.Shards(s); n != 0 {
		t.Errorf("Shards() of a new lease = %d, want 0", n)
	}
	signal.Spread(s)
	if n, want := signal.Shards(s), 1+min(max(1, runtime.GOMAXPROCS(0)), 64); n < want {
		t.Errorf("Shards() after Spread = %d, want at least %d", n, want)
	}
}
