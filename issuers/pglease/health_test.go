package pglease_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/lost"
)

// recorder is an Observer that keeps every event and wakes the test.
type recorder struct {
	mu  sync.Mutex
	all []health.Event
	new chan struct{}
}

func newRecorder() *recorder { return &recorder{new: make(chan struct{}, 1)} }

func (r *recorder) Observe(e health.Event) {
	r.mu.Lock()
	r.all = append(r.all, e)
	r.mu.Unlock()
	select {
	case r.new <- struct{}{}:
	default:
	}
}

func (r *recorder) events() []health.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// waitFor waits until n events of kind arrived, and returns every event.
func (r *recorder) waitFor(t *testing.T, kind health.Kind, n int) []health.Event {
	t.Helper()
	guard := time.After(time.Minute)
	for {
		all := r.events()
		count := 0
		for _, e := range all {
			if e.Kind == kind {
				count++
			}
		}
		if count >= n {
			return all
		}
		select {
		case <-r.new:
		case <-guard:
			t.Fatalf("%d %v events within a minute, want %d: %v", count, kind, n, kindsOf(all))
		}
	}
}

func kindsOf(es []health.Event) []health.Kind {
	var k []health.Kind
	for _, e := range es {
		k = append(k, e.Kind)
	}
	return k
}

// TestObserverEvents: on a shared session and on a session of its own, a
// lease's observer is told of its grant, its confirmed heartbeats in order,
// and its release; another's, of its grant and its loss when its backend
// is terminated.
func TestObserverEvents(t *testing.T) {
	for _, own := range []bool{false, true} {
		name := map[bool]string{false: "shared", true: "own"}[own]
		t.Run(name, func(t *testing.T) {
			admin := connect(t, server, server.Addr())
			pool := newPool(t, server, server.Addr())
			rec := newRecorder()
			cfg := fast
			cfg.OwnSession, cfg.Observer = own, rec
			l := lock(t, cfg, pool, "observed "+name)
			rec.waitFor(t, health.Renewed, 2)
			h := l.Health()
			unlock(t, l)
			all := rec.events()
			ks := kindsOf(all)
			if ks[0] != health.Granted || ks[len(ks)-1] != health.Released {
				t.Fatalf("events = %v, want granted first and released last", ks)
			}
			var last time.Time
			for _, e := range all[1 : len(all)-1] {
				switch e.Kind {
				case health.Renewed:
					if e.Sent.Before(last) || e.Deadline.Sub(e.Sent) != fast.Deadline {
						t.Errorf("renewed: sent %v after %v, deadline %v after it; want later sends, the Deadline", e.Sent, last, e.Deadline.Sub(e.Sent))
					}
					last = e.Sent
				case health.AtRisk, health.RenewalFailed:
				default:
					t.Errorf("event %v between the grant and the release", e.Kind)
				}
			}
			if g := all[0]; g.Subject != "observed "+name || g.Token != l.Token() || g.Issuer != "pglease" || g.Wait <= 0 {
				t.Errorf("granted = %+v, want the subject, token %d, a wait", g, l.Token())
			}
			if h.Deadline.Sub(h.Renewed) != fast.Deadline || h.Margin <= 0 {
				t.Errorf("Health() = %+v, want the deadline Deadline after the heartbeat, a margin > 0", h)
			}

			rec2 := newRecorder()
			cfg.Observer = rec2
			l2 := lock(t, cfg, pool, "observed lost "+name)
			terminate(t, admin, holder(t, admin, l2.Key()))
			waitLost(t, l2)
			all = rec2.waitFor(t, health.Lost, 1)
			loss := all[len(all)-1]
			var le *lost.Error
			if !errors.As(loss.Err, &le) || loss.Err != l2.Signal().Err() || loss.Via != health.Push {
				t.Errorf("lost = %v via %v, want the signal's error via push", loss.Err, loss.Via)
			}
			if all[0].Kind != health.Granted || slices.ContainsFunc(all[1:len(all)-1], func(e health.Event) bool { return e.Kind == health.Lost || e.Kind == health.Released }) {
				t.Errorf("events = %v, want the grant first and one loss last", kindsOf(all))
			}
			l2.Unlock(context.Background())
			if n := len(rec2.events()); n != len(all) {
				t.Errorf("the Unlock of a lost lease reported %d events more", n-len(all))
			}
		})
	}
}

// TestUnlockCancelledContextHandsOver: an Unlock whose context was
// cancelled still sends its release, and says it did: nil, and a waiting
// Lock of another pool is granted at once, on a shared session and on a
// session of its own.
func TestUnlockCancelledContextHandsOver(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pa, pb := newPool(t, server, server.Addr()), newPool(t, server, server.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, own := range []bool{false, true} {
		cfg := sturdy
		cfg.OwnSession = own
		subject := map[bool]string{false: "cancelled shared", true: "cancelled own"}[own]
		a := lock(t, cfg, pa, subject)
		ch := lockAsync(t, admin, cfg, pb, subject)
		time.Sleep(3 * cfg.Heartbeat)
		start := time.Now()
		if err := a.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock(cancelled context) = %v, want nil: the release went through", subject, err)
		}
		g := waitGranted(t, ch)
		if g.err != nil {
			t.Fatalf("%s: the waiting Lock = %v", subject, g.err)
		}
		t.Logf("%s: Unlock(cancelled context) → waiting Lock granted in %v", subject, g.at.Sub(start))
		if took := g.at.Sub(start); took >= cfg.ServerTimeout/2 {
			t.Errorf("%s: the waiting Lock was granted %v after the Unlock, not by its release", subject, took)
		}
		unlock(t, g.lease)
	}
}
