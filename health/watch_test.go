package health_test

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/zukhruf/lease/health"
)

// syncRecord is a record safe for the timer's goroutine.
type syncRecord struct {
	mu  sync.Mutex
	all []health.Event
}

func (r *syncRecord) Observe(e health.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, e)
}

func (r *syncRecord) events() []health.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]health.Event(nil), r.all...)
}

func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r syncRecord
		var w health.Watch
		e := health.Event{Issuer: "redislease", Subject: "orders"}
		start := time.Now()
		w.Arm(&r, e, start, start.Add(900*time.Millisecond))
		time.Sleep(500 * time.Millisecond)
		// A renewal confirmed: the watch moves with the deadline.
		w.Arm(&r, e, start.Add(400*time.Millisecond), start.Add(1300*time.Millisecond))
		time.Sleep(300 * time.Millisecond)
		synctest.Wait()
		if got := r.events(); len(got) != 0 {
			t.Fatalf("events before the moved warning = %v, want none", got)
		}
		time.Sleep(200 * time.Millisecond) // past 1300 - 300 ms
		synctest.Wait()
		got := r.events()
		if len(got) != 1 || got[0].Kind != health.AtRisk || !errors.Is(got[0].Err, health.ErrUnconfirmed) ||
			got[0].Margin != 300*time.Millisecond || !got[0].Deadline.Equal(start.Add(1300*time.Millisecond)) {
			t.Fatalf("events = %+v, want one AtRisk of ErrUnconfirmed 300 ms before the deadline", got)
		}
		w.Stop()
		w.Arm(&r, e, start.Add(time.Second), start.Add(2*time.Second))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := len(r.events()); n != 1 {
			t.Errorf("%d events after Stop, want none more", n-1)
		}
	})
}

// TestWatchPastDeadline: a warning whose timer runs at or past the
// deadline tells nothing; the Lost that follows does.
func TestWatchPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r syncRecord
		var w health.Watch
		start := time.Now()
		w.Arm(&r, health.Event{Subject: "orders"}, start.Add(-2*time.Second), start.Add(-time.Millisecond))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := r.events(); len(got) != 0 {
			t.Errorf("events past the deadline = %+v, want none", got)
		}
	})
}

func TestWatchNil(t *testing.T) {
	var w health.Watch
	w.Arm(nil, health.Event{}, time.Now(), time.Now().Add(time.Millisecond)) // nothing armed
	w.Stop()
}
