package ctrltest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/issuers/ctrllease"
	"github.com/zukhruf/lease/issuers/k8slease"
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

// TestObserverSeesTerms: the observer of Options.Config is told of each
// term's lease: a's grant, its renewals and its loss when an operator takes
// the Lease, then, after a's next term, its release when a stops.
func TestObserverSeesTerms(t *testing.T) {
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	makeConfigMap(t, cm)
	rec := newRecorder()
	a := startReplica(t, b, "a", name, cm, replicaOptions{opts: func(o *ctrllease.Options) { o.Config.Observer = rec }})
	waitLeading(t, b, a, 1)
	rec.waitFor(t, health.Renewed, 1)
	takeOver(t, name, "operator")
	all := rec.waitFor(t, health.Lost, 1)
	if loss := all[len(all)-1]; !errors.Is(loss.Err, k8slease.ErrTakenOver) || loss.Issuer != "k8slease" {
		t.Errorf("lost = %v of %s, want ErrTakenOver of k8slease", loss.Err, loss.Issuer)
	}
	waitLeading(t, b, a, 2) // the operator's record expires after its 2 s
	a.stop()
	<-a.done
	all = rec.waitFor(t, health.Released, 1)
	ks := kindsOf(all)
	if ks[0] != health.Granted || ks[len(ks)-1] != health.Released {
		t.Fatalf("events = %v, want granted first and released last", ks)
	}
	if n := len(slices.DeleteFunc(slices.Clone(ks), func(k health.Kind) bool { return k != health.Granted })); n != 2 {
		t.Errorf("events = %v: %d grants, want 2 terms", ks, n)
	}
}
