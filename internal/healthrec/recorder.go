package healthrec

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
)

// WaitBound is how long [Recorder.WaitFor] waits before it fails the test.
const WaitBound = time.Minute

// Stamped is an event and the time the observer was told of it.
type Stamped struct {
	health.Event
	At time.Time
}

// Recorder is a [health.Observer] that keeps every event it is told, with
// the time it was told, and wakes a waiting test.
//
// The zero Recorder is ready to use. A Recorder must not be copied after
// first use. It is safe for use by many goroutines at once.
type Recorder struct {
	mu   sync.Mutex
	all  []Stamped
	wake chan struct{}
}

// Observe keeps e with the time it was told and wakes a receiver of
// [Recorder.Notify].
func (r *Recorder) Observe(e health.Event) {
	r.mu.Lock()
	// Stamped under the lock, the times rise with the order of the events.
	r.all = append(r.all, Stamped{e, time.Now()})
	wake := r.wakeLocked()
	r.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

func (r *Recorder) wakeLocked() chan struct{} {
	if r.wake == nil {
		r.wake = make(chan struct{}, 1)
	}
	return r.wake
}

// Notify returns a channel that receives a value after an event is
// observed: one value for any number of events told since the last
// receive, so a reader receives, then reads [Recorder.Events].
// Successive calls to Notify return the same channel.
func (r *Recorder) Notify() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wakeLocked()
}

// Events returns a copy of every event told so far, in order.
func (r *Recorder) Events() []health.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Unstamp(r.all)
}

// Stamped returns a copy of every event told so far, in order, each with
// the time it was told.
func (r *Recorder) Stamped() []Stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// Kinds returns the kinds of every event told so far, in order.
func (r *Recorder) Kinds() []health.Kind { return Kinds(r.Events()) }

// Count returns how many events of kind were told so far.
func (r *Recorder) Count(kind health.Kind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.all {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// Await waits until n events of kind were told, or ctx ends; it returns
// every event told, and, if ctx ended first, an error that says how many
// came and wraps ctx's error.
func (r *Recorder) Await(ctx context.Context, kind health.Kind, n int) ([]health.Event, error) {
	wake := r.Notify()
	for {
		all := r.Events()
		count := Count(all, kind)
		if count >= n {
			return all, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return r.Events(), fmt.Errorf("healthrec: %d %v events, want %d: %v: %w", count, kind, n, Kinds(all), context.Cause(ctx))
		}
	}
}

// WaitFor waits until n events of kind were told, and returns every event
// told; after [WaitBound] it fails the test.
func (r *Recorder) WaitFor(t testing.TB, kind health.Kind, n int) []health.Event {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(context.Background(), WaitBound, fmt.Errorf("not within %v", WaitBound))
	defer cancel()
	all, err := r.Await(ctx, kind, n)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// Kinds returns the kind of each event of es, in order.
func Kinds(es []health.Event) []health.Kind {
	var k []health.Kind
	for _, e := range es {
		k = append(k, e.Kind)
	}
	return k
}

// Count returns how many events of es are of kind.
func Count(es []health.Event, kind health.Kind) int {
	n := 0
	for _, e := range es {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// Unstamp returns the events of es without their times.
func Unstamp(es []Stamped) []health.Event {
	out := make([]health.Event, len(es))
	for i, e := range es {
		out[i] = e.Event
	}
	return out
}
