package controller_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/zukhruf/lease/controller"
)

// The costs an issuer pays for each lease are pinned here: a change that adds
// an allocation to the lifecycle fails.

var errAllocs = errors.New("the coordinator refused the claim")

// allocsEach returns the allocations of f, run on a fresh controller each
// time; the controllers are made before, so their cost is not counted.
func allocsEach(runs int, prepare func(*controller.Controller), f func(*controller.Controller)) float64 {
	cs := make([]*controller.Controller, runs+1) // AllocsPerRun calls once more to warm up
	for i := range cs {
		cs[i] = controller.New("orders")
		if prepare != nil {
			prepare(cs[i])
		}
	}
	i := 0
	return testing.AllocsPerRun(runs, func() {
		f(cs[i])
		i++
	})
}

// New, Signal and End: one allocation, the lease itself.
func TestAllocsLifecycle(t *testing.T) {
	got := testing.AllocsPerRun(1000, func() {
		c := controller.New("orders")
		if c.Signal().Err() != nil {
			panic("lost")
		}
		c.End()
	})
	if got != 1 {
		t.Errorf("New, Signal().Err() and End: %v allocations, want 1", got)
	}
}

// That one allocation is at most 64 bytes.
func TestBytesLifecycle(t *testing.T) {
	const n = 10_000
	cs := make([]*controller.Controller, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range cs {
		cs[i] = controller.New("orders")
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(cs)
	// Integer division: up to n-1 bytes allocated by anything else in the
	// meantime do not count, one more byte per lease does.
	if got := (after.TotalAlloc - before.TotalAlloc) / n; got > 64 {
		t.Errorf("New: %d bytes per lease, want at most 64", got)
	}
}

func TestAllocsEach(t *testing.T) {
	lose := func(c *controller.Controller) { c.Lose(errAllocs) }
	end := func(c *controller.Controller) { c.End() }
	warm := func(c *controller.Controller) { c.Signal().Done() }
	tests := []struct {
		name    string
		prepare func(*controller.Controller)
		call    func(*controller.Controller)
		want    float64
	}{
		{"End/live", nil, end, 0},
		{"End/live/warm", warm, end, 0},
		{"End/lost", lose, end, 0},
		{"End/ended", end, end, 0},
		{"Lose/second", lose, lose, 0},
		{"Lose/ended", end, lose, 0},
		// The first loss allocates nothing: the one lost.Error every holder
		// shares lives in the lease.
		{"Lose/first", nil, lose, 0},
		{"Lose/first/warm", warm, lose, 0},
		{"Subject", nil, func(c *controller.Controller) { _ = c.Subject() }, 0},
		{"Signal", nil, func(c *controller.Controller) { _ = c.Signal() }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := allocsEach(100, tt.prepare, tt.call); got != tt.want {
				t.Errorf("allocations = %v, want %v", got, tt.want)
			}
		})
	}
}

// A loss as a holder sees it: New, Done, Lose and Err cost the lease and the
// channel: 2. The error lives in the lease.
func TestAllocsLoss(t *testing.T) {
	got := testing.AllocsPerRun(1000, func() {
		c := controller.New("orders")
		s := c.Signal()
		done := s.Done()
		c.Lose(errAllocs)
		<-done
		if s.Err() == nil {
			panic("live")
		}
	})
	if got != 2 {
		t.Errorf("New, Done, Lose and Err: %v allocations, want 2", got)
	}
}
