package k8slease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
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

// TestObserverRenewalFailed: a renewal that fails before the deadline (its
// connection reset while the apiserver heard nothing of it) is reported
// RenewalFailed, then AtRisk, each with its error and the time left; the
// renewal sent again is confirmed, and the lease lives on.
func TestObserverRenewalFailed(t *testing.T) {
	p, err := faultnet.Listen(shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec := newRecorder()
	cfg := k8slease.Config{LeaseDuration: 6 * time.Second, Observer: rec}
	l := mustLock(t, cfg, clientset(t, shared.ConfigVia(p.Addr())), leaseName(t), "a")
	rec.waitFor(t, health.Renewed, 1)
	p.Drop(faultnet.ToServer)
	time.Sleep(1500 * time.Millisecond) // the next renewal, sent each second, hangs
	p.Cut()
	p.Heal()
	all := rec.waitFor(t, health.RenewalFailed, 1)
	all = rec.waitFor(t, health.Renewed, count(all, health.Renewed)+1)
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("lost: %v", err)
	}
	failed := slices.IndexFunc(all, func(e health.Event) bool { return e.Kind == health.RenewalFailed })
	f := all[failed]
	if f.Err == nil || f.Margin <= 0 || f.Sent.IsZero() || !f.Deadline.After(f.Sent) {
		t.Errorf("renewal failed = %+v, want its error, a margin > 0, its send time and deadline", f)
	}
	if r := all[failed+1]; r.Kind != health.AtRisk || r.Err != f.Err || r.Margin != f.Margin {
		t.Errorf("after RenewalFailed: %v (%v, margin %v), want AtRisk with its error and margin", r.Kind, r.Err, r.Margin)
	}
}

func count(es []health.Event, kind health.Kind) int {
	n := 0
	for _, e := range es {
		if e.Kind == kind {
			n++
		}
	}
	return n
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

// stamped is an event and the time it was observed.
type stamped struct {
	health.Event
	at time.Time
}

// stampRecorder is an Observer that keeps every event with its time.
type stampRecorder struct {
	mu  sync.Mutex
	all []stamped
}

func (r *stampRecorder) Observe(e health.Event) {
	r.mu.Lock()
	r.all = append(r.all, stamped{e, time.Now()})
	r.mu.Unlock()
}

func (r *stampRecorder) events() []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// count returns how many events of kind were observed.
func (r *stampRecorder) count(kind health.Kind) int {
	n := 0
	for _, e := range r.events() {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// slowed is the outcome of a slowed-link trial: the events, the time the
// link was slowed, and the deadline the lease was lost at.
type slowed struct {
	events   []stamped
	slowedAt time.Time
	deadline time.Time
}

// warning returns the first AtRisk event observed after the link was
// slowed and before the deadline the lease was lost at, and whether there
// is one: an event before the slowing (a renewal made slow by a loaded
// machine) warns of nothing that follows, and one after the deadline (the
// renewal cut by it, reported failed) of nothing at all.
func (s slowed) warning() (stamped, bool) {
	for _, e := range s.events {
		switch {
		case e.Kind == health.Lost || !e.at.Before(s.deadline):
			return stamped{}, false
		case e.Kind == health.AtRisk && !e.at.Before(s.slowedAt):
			return e, true
		}
	}
	return stamped{}, false
}

// slowedRun holds a 2 s lease through a proxy of its own, on a clientset
// of its own, until renewals renewals were confirmed; then it delays every
// byte of the link by half of share of the lease's deadline span each way
// (a round trip of share of the span), waits for the loss, heals the link,
// unlocks and returns every event the lease's observer was told of. It is
// safe to run beside other trials: it reports failures as errors.
func slowedRun(ctx context.Context, name string, renewals int, share float64) (slowed, error) {
	var out slowed
	p, err := faultnet.Listen(shared.Addr())
	if err != nil {
		return out, err
	}
	defer p.Close()
	cfg := shared.ConfigVia(p.Addr())
	cfg.Dial = (&net.Dialer{}).DialContext // a transport of its own
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return out, err
	}
	defer cs.CoordinationV1().RESTClient().(*rest.RESTClient).Client.CloseIdleConnections()
	rec := &stampRecorder{}
	l, err := k8slease.Config{LeaseDuration: 2 * time.Second, Observer: rec}.Lock(ctx, cs, ns, name, "a")
	if err != nil {
		return out, err
	}
	for rec.count(health.Renewed) < renewals {
		select {
		case <-l.Signal().Done():
			l.Unlock(context.Background())
			return out, fmt.Errorf("lost before %d renewals on a healthy link: %w", renewals, l.Signal().Err())
		case <-ctx.Done():
			l.Unlock(context.Background())
			return out, fmt.Errorf("%d renewals: %w", renewals, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	h := l.Health()
	out.slowedAt = time.Now()
	p.Delay(time.Duration(share * float64(h.Deadline.Sub(h.Renewed)) / 2))
	select {
	case <-l.Signal().Done():
	case <-ctx.Done():
		l.Unlock(context.Background())
		return out, fmt.Errorf("the lease was not lost through the slowed link: %w", ctx.Err())
	}
	out.deadline = l.Health().Deadline
	p.Heal()
	l.Unlock(context.Background()) // nothing to report after the loss
	// The loss is reported right after the signal is lost.
	for start := time.Now(); rec.count(health.Lost) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			return out, fmt.Errorf("no Lost event within 10 s of the loss: %v", l.Signal().Err())
		}
	}
	out.events = rec.events()
	return out, nil
}

// TestAtRiskBeforeLoss: a 2 s lease renewed twice, then its link to the
// apiserver slowed to a round trip of 80% of its deadline span, is lost;
// after the slowing and before the deadline its observer is told AtRisk,
// after the deadline nothing but the Lost event, and nothing after that;
// in each of 30 trials, each with its own proxy, clientset and Lease,
// atOnce at a time.
func TestAtRiskBeforeLoss(t *testing.T) {
	const trials, atOnce = 30, 10
	outs, errs := make([]slowed, trials), make([]error, trials)
	slots := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	base := leaseName(t)
	for i := range trials {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			outs[i], errs[i] = slowedRun(ctx, fmt.Sprintf("%s-%d", base, i), 2, 0.8)
		})
	}
	wg.Wait()
	warned, lead := 0, []time.Duration{}
	for i, out := range outs {
		if errs[i] != nil {
			t.Errorf("trial %d: %v", i, errs[i])
			continue
		}
		lost := slices.IndexFunc(out.events, func(e stamped) bool { return e.Kind == health.Lost })
		if after := out.events[lost+1:]; len(after) > 0 {
			t.Errorf("trial %d: events after the loss: %v", i, kindsOf(unstamp(after)))
		}
		for _, e := range out.events[:lost] {
			// The renewal cut by the deadline warns of nothing: the
			// deadline's Lost tells it.
			if !e.at.Before(out.deadline) {
				t.Errorf("trial %d: %v %v after the deadline, before the Lost event (margin %v, %v)", i, e.Kind, e.at.Sub(out.deadline), e.Margin, e.Err)
			}
		}
		w, ok := out.warning()
		if !ok {
			t.Errorf("trial %d: lost via %v with no AtRisk between the slowing and the deadline: %v", i, out.events[lost].Via, kindsOf(unstamp(out.events)))
			continue
		}
		warned++
		lead = append(lead, out.deadline.Sub(w.at))
	}
	slices.Sort(lead)
	if len(lead) > 0 {
		t.Logf("AtRisk before the loss in %d of %d trials, %v before the deadline (median; least %v)", warned, trials, lead[len(lead)/2], lead[0])
	}
}

func unstamp(es []stamped) []health.Event {
	out := make([]health.Event, len(es))
	for i, e := range es {
		out[i] = e.Event
	}
	return out
}
