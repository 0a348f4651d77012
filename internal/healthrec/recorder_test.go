package healthrec_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/healthrec"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRecorderZero: the zero Recorder has no events and records the ones
// it is told, in order, each stamped with a time within the call.
func TestRecorderZero(t *testing.T) {
	var r healthrec.Recorder
	if got := r.Events(); len(got) != 0 {
		t.Fatalf("Events() = %v, want none", got)
	}
	before := time.Now()
	r.Observe(health.Event{Kind: health.Granted, Token: 1})
	r.Observe(health.Event{Kind: health.Renewed, Token: 1})
	after := time.Now()
	if got, want := r.Kinds(), []health.Kind{health.Granted, health.Renewed}; !slices.Equal(got, want) {
		t.Errorf("Kinds() = %v, want %v", got, want)
	}
	for _, s := range r.Stamped() {
		if s.At.Before(before) || s.At.After(after) {
			t.Errorf("stamped %v at %v, want within [%v, %v]", s.Kind, s.At, before, after)
		}
	}
	if got := r.Count(health.Renewed); got != 1 {
		t.Errorf("Count(renewed) = %d, want 1", got)
	}
}

// TestRecorderCopies: what Events and Stamped return is the caller's: a
// change to it changes nothing in the Recorder.
func TestRecorderCopies(t *testing.T) {
	var r healthrec.Recorder
	r.Observe(health.Event{Kind: health.Granted})
	r.Events()[0].Kind = health.Lost
	r.Stamped()[0].Kind = health.Lost
	if got := r.Kinds(); !slices.Equal(got, []health.Kind{health.Granted}) {
		t.Errorf("Kinds() = %v after the copies were changed, want [granted]", got)
	}
}

// TestRecorderConcurrent: events told by many goroutines at once are all
// kept, their times rising with their order, and a waiter on another
// goroutine is woken for them.
func TestRecorderConcurrent(t *testing.T) {
	const goroutines, each = 8, 100
	var r healthrec.Recorder
	done := make(chan []health.Event)
	go func() {
		all, err := r.Await(context.Background(), health.Renewed, goroutines*each)
		if err != nil {
			t.Error(err)
		}
		done <- all
	}()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				r.Observe(health.Event{Kind: health.Renewed})
				r.Events()
			}
		})
	}
	wg.Wait()
	if all := <-done; len(all) != goroutines*each {
		t.Errorf("Await returned %d events, want %d", len(all), goroutines*each)
	}
	if got := r.Count(health.Renewed); got != goroutines*each {
		t.Errorf("Count(renewed) = %d, want %d", got, goroutines*each)
	}
	st := r.Stamped()
	for i := 1; i < len(st); i++ {
		if st[i].At.Before(st[i-1].At) {
			t.Fatalf("event %d stamped %v, before event %d's %v", i, st[i].At, i-1, st[i-1].At)
		}
	}
}

// TestRecorderNotify: one event wakes a receiver of Notify; many events
// before a receive leave one value; Notify returns the same channel.
func TestRecorderNotify(t *testing.T) {
	var r healthrec.Recorder
	wake := r.Notify()
	if r.Notify() != wake {
		t.Fatal("Notify returned another channel")
	}
	select {
	case <-wake:
		t.Fatal("woken with no event")
	default:
	}
	r.Observe(health.Event{Kind: health.Granted})
	r.Observe(health.Event{Kind: health.Renewed})
	<-wake
	select {
	case <-wake:
		t.Fatal("woken twice for events told before one receive")
	default:
	}
}

// TestAwaitEnded: Await whose context ended returns the events told, and
// an error that says how many came and wraps the context's cause.
func TestAwaitEnded(t *testing.T) {
	var r healthrec.Recorder
	r.Observe(health.Event{Kind: health.Renewed})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	all, err := r.Await(ctx, health.Renewed, 2)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Await(ended) = %v, want context.Canceled", err)
	}
	if len(all) != 1 {
		t.Errorf("Await(ended) returned %d events, want 1", len(all))
	}
	if all, err := r.Await(ctx, health.Renewed, 1); err != nil || len(all) != 1 {
		t.Errorf("Await(ended) with the events told = %d events, %v; want 1, nil", len(all), err)
	}
}

// TestWaitFor: WaitFor returns at once when the events were told.
func TestWaitFor(t *testing.T) {
	var r healthrec.Recorder
	go func() {
		r.Observe(health.Event{Kind: health.Granted})
		r.Observe(health.Event{Kind: health.Lost})
	}()
	if got := healthrec.Kinds(r.WaitFor(t, health.Lost, 1)); !slices.Equal(got, []health.Kind{health.Granted, health.Lost}) {
		t.Errorf("WaitFor(lost, 1) = %v, want [granted lost]", got)
	}
}

// TestUnstamp: Unstamp keeps the events and their order.
func TestUnstamp(t *testing.T) {
	var r healthrec.Recorder
	r.Observe(health.Event{Kind: health.Granted, Token: 7})
	r.Observe(health.Event{Kind: health.Released, Token: 7})
	if got, want := healthrec.Unstamp(r.Stamped()), r.Events(); !slices.Equal(got, want) {
		t.Errorf("Unstamp(Stamped()) = %v, want %v", got, want)
	}
}
