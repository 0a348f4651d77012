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
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/lost"
)

// TestObserverEvents: a lease's observer is told of its grant, its
// renewals in order, and its release; another's, of its grant and its loss
// when an operator names another holder, pushed by the watch.
func TestObserverEvents(t *testing.T) {
	cs := clientset(t, shared.Config())
	rec := &healthrec.Recorder{}
	cfg := k8slease.Config{LeaseDuration: 4 * time.Second, Observer: rec}
	name := leaseName(t)
	l := mustLock(t, cfg, cs, name, "a")
	rec.WaitFor(t, health.Renewed, 2)
	h := l.Health()
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	all := rec.Events()
	renewals, err := healthrec.Renewals(all)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, e := range renewals {
		if !e.Sent.After(last) || e.Margin <= 0 {
			t.Errorf("renewed: sent %v after %v, margin %v; want later sends and a margin > 0", e.Sent, last, e.Margin)
		}
		last = e.Sent
	}
	if g := all[0]; g.Subject != ns+"/"+name || g.Token != l.Token() || g.Issuer != "k8slease" || g.Wait <= 0 {
		t.Errorf("granted = %+v, want subject %s/%s, token %d, a wait", g, ns, name, l.Token())
	}
	if !h.Deadline.Equal(l.Deadline()) && !h.Deadline.Before(l.Deadline()) || h.Margin <= 0 || !h.Deadline.After(h.Renewed) {
		t.Errorf("Health() = %+v, want Deadline's deadline, a margin > 0", h)
	}

	rec2 := &healthrec.Recorder{}
	name2 := leaseName(t)
	l2 := mustLock(t, k8slease.Config{LeaseDuration: 30 * time.Second, Observer: rec2}, cs, name2, "a")
	edit(t, cs, name2, func(l *coordinationv1.Lease) {
		other := "operator"
		l.Spec.HolderIdentity = &other
	})
	waitLost(t, l2, time.Minute)
	all = rec2.WaitFor(t, health.Lost, 1)
	if got, want := healthrec.Kinds(all), []health.Kind{health.Granted, health.Lost}; !slices.Equal(got, want) {
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
	rec := &healthrec.Recorder{}
	cfg := k8slease.Config{LeaseDuration: 6 * time.Second, Observer: rec}
	l := mustLock(t, cfg, clientset(t, shared.ConfigVia(p.Addr())), leaseName(t), "a")
	rec.WaitFor(t, health.Renewed, 1)
	p.Drop(faultnet.ToServer)
	time.Sleep(1500 * time.Millisecond) // the next renewal, sent each second, hangs
	p.Cut()
	p.Heal()
	all := rec.WaitFor(t, health.RenewalFailed, 1)
	all = rec.WaitFor(t, health.Renewed, healthrec.Count(all, health.Renewed)+1)
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

// slowed is the outcome of a slowed-link trial: the events, the time the
// link was slowed, and the deadline the lease was lost at.
type slowed struct {
	events   []healthrec.Stamped
	slowedAt time.Time
	deadline time.Time
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
	rec := &healthrec.Recorder{}
	l, err := k8slease.Config{LeaseDuration: 2 * time.Second, Observer: rec}.Lock(ctx, cs, ns, name, "a")
	if err != nil {
		return out, err
	}
	for rec.Count(health.Renewed) < renewals {
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
	for start := time.Now(); rec.Count(health.Lost) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			return out, fmt.Errorf("no Lost event within 10 s of the loss: %v", l.Signal().Err())
		}
	}
	out.events = rec.Stamped()
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
	sum := healthrec.Summary{Trials: trials}
	for i, out := range outs {
		if errs[i] != nil {
			t.Errorf("trial %d: %v", i, errs[i])
			continue
		}
		// An event before the slowing (a renewal made slow by a loaded
		// machine) warns of nothing that follows.
		from := slices.IndexFunc(out.events, func(e healthrec.Stamped) bool { return !e.At.Before(out.slowedAt) })
		if from < 0 {
			from = len(out.events)
		}
		w, err := healthrec.AtRiskBeforeLoss(healthrec.Unstamp(out.events), healthrec.Trial{From: from})
		lost, late := slices.IndexFunc(out.events, func(e healthrec.Stamped) bool { return e.Kind == health.Lost }), false
		for _, e := range out.events[:max(lost, 0)] {
			// The renewal cut by the deadline warns of nothing: the
			// deadline's Lost tells it.
			if !e.At.Before(out.deadline) {
				t.Errorf("trial %d: %v %v after the deadline, before the Lost event (margin %v, %v)", i, e.Kind, e.At.Sub(out.deadline), e.Margin, e.Err)
				late = true
			}
		}
		if err != nil {
			t.Errorf("trial %d: the AtRisk between the slowing and the deadline: %v", i, err)
		}
		if err != nil || late {
			continue
		}
		sum.Margins = append(sum.Margins, out.deadline.Sub(out.events[w.Risk].At))
	}
	if sum.Warned() > 0 {
		t.Log(sum)
	}
}
