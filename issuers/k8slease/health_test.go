package k8slease_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/issuers/k8slease"
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

// TestObserverEvents: a lease's observer is told of its grant, its
// renewals in order, and its release; another's, of its grant and its loss
// when an operator names another holder, pushed by the watch.
func TestObserverEvents(t *testing.T) {
	cs := clientset(t, shared.Config())
	rec := newRecorder()
	cfg := k8slease.Config{LeaseDuration: 4 * time.Second, Observer: rec}
	name := leaseName(t)
	l := mustLock(t, cfg, cs, name, "a")
	rec.waitFor(t, health.Renewed, 2)
	h := l.Health()
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	all := rec.events()
	ks := kindsOf(all)
	if ks[0] != health.Granted || ks[len(ks)-1] != health.Released {
		t.Fatalf("events = %v, want granted first and released last", ks)
	}
	var last time.Time
	for _, e := range all[1 : len(all)-1] {
		switch e.Kind {
		case health.Renewed:
			if !e.Sent.After(last) || e.Margin <= 0 {
				t.Errorf("renewed: sent %v after %v, margin %v; want later sends and a margin > 0", e.Sent, last, e.Margin)
			}
			last = e.Sent
		case health.AtRisk, health.RenewalFailed: // a slow renewal on a loaded machine
		default:
			t.Errorf("event %v between the grant and the release", e.Kind)
		}
	}
	if g := all[0]; g.Subject != ns+"/"+name || g.Token != l.Token() || g.Issuer != "k8slease" || g.Wait <= 0 {
		t.Errorf("granted = %+v, want subject %s/%s, token %d, a wait", g, ns, name, l.Token())
	}
	if !h.Deadline.Equal(l.Deadline()) && !h.Deadline.Before(l.Deadline()) || h.Margin <= 0 || !h.Deadline.After(h.Renewed) {
		t.Errorf("Health() = %+v, want Deadline's deadline, a margin > 0", h)
	}

	rec2 := newRecorder()
	name2 := leaseName(t)
	l2 := mustLock(t, k8slease.Config{LeaseDuration: 30 * time.Second, Observer: rec2}, cs, name2, "a")
	edit(t, cs, name2, func(l *coordinationv1.Lease) {
		other := "operator"
		l.Spec.HolderIdentity = &other
	})
	waitLost(t, l2, time.Minute)
	all = rec2.waitFor(t, health.Lost, 1)
	if got, want := kindsOf(all), []health.Kind{health.Granted, health.Lost}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	var le *lost.Error
	if e := all[1]; !errors.As(e.Err, &le) || e.Err != l2.Signal().Err() || e.Via != health.Push {
		t.Errorf("lost = %v via %v, want the signal's error %v via push", e.Err, e.Via, l2.Signal().Err())
	}
}

// TestUnlockCancelledContext: an Unlock whose context has ended still
// sends its release, and says it did: nil, and a waiting Lock is granted
// at once, long before the 60 s lease could expire.
func TestUnlockCancelledContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
	}{
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}},
		{"expired", func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			_ = cancel
			return ctx
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			long := k8slease.Config{LeaseDuration: time.Minute}
			name := leaseName(t)
			a := mustLock(t, long, clientset(t, shared.Config()), name, "a")
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			b := lockAsync(ctx, long, clientset(t, shared.Config()), name, "b")
			time.Sleep(500 * time.Millisecond) // B reads the record and waits
			start := time.Now()
			if err := a.Unlock(tc.ctx()); err != nil {
				t.Fatalf("Unlock(%s context) = %v, want nil: the release went through", tc.name, err)
			}
			g := <-b
			if g.err != nil {
				t.Fatalf("B's Lock = %v, want the lease within 30 s of a 60 s lease", g.err)
			}
			defer g.l.Unlock(context.Background())
			t.Logf("Unlock(%s context) → waiting Lock granted in %v", tc.name, g.at.Sub(start))
		})
	}
}
