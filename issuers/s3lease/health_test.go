package s3lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/s3lease"
	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"
	"github.com/zukhruf/lease/lost"
)

// TestObserverEvents: a lease's observer is told of its grant, its
// renewals in order with their margins, and its release; another's, of its
// grant and its loss to an operator's delete, with the *lost.Error and how
// it was learned: the answer to its next renewal.
func TestObserverEvents(t *testing.T) {
	c := client(t, shared.Addr())
	rec := &healthrec.Recorder{}
	cfg := short
	cfg.Observer = rec
	key := keyName(t)
	l := mustLock(t, cfg, c, key)
	rec.WaitFor(t, health.Renewed, 2)
	h := l.Health()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := rec.Events()
	renewals, err := healthrec.Renewals(all)
	if err != nil {
		t.Fatal(err)
	}
	span := short.TTL - short.TTL/10 - short.TTL/20 // the deadline: TTL less ClockSkew and Margin
	var last time.Time
	for _, e := range renewals {
		if !e.Sent.After(last) || e.Margin <= 0 || e.Deadline.Sub(e.Sent) != span || e.RoundTrip <= 0 {
			t.Errorf("renewed: sent %v after %v, margin %v, round trip %v, deadline %v after the send; want later sends, a margin and a round trip > 0, %v",
				e.Sent, last, e.Margin, e.RoundTrip, e.Deadline.Sub(e.Sent), span)
		}
		last = e.Sent
	}
	if g := all[0]; g.Subject != key || g.Token != l.Token() || g.Issuer != "s3lease" || g.Wait <= 0 {
		t.Errorf("granted = %+v, want subject %q, token %d, a wait", g, key, l.Token())
	}
	if r := all[len(all)-1]; r.Err != nil || r.Token != l.Token() {
		t.Errorf("released = %+v, want no error and token %d", r, l.Token())
	}
	if h.Deadline.Sub(h.Renewed) != span || h.Margin <= 0 || h.Margin > span {
		t.Errorf("Health() = %+v, want a deadline %v after the renewal and a margin in (0, %v]", h, span, span)
	}

	// A loss, learned from a renewal's answer: the object deleted by an
	// operator.
	rec2 := &healthrec.Recorder{}
	cfg2 := s3lease.Config{Bucket: bucket, TTL: 10 * time.Second, Observer: rec2}
	l2 := mustLock(t, cfg2, c, key)
	if err := client(t, shared.Addr()).RemoveObject(t.Context(), bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLost(t, l2, time.Minute)
	all = rec2.WaitFor(t, health.Lost, 1)
	if ks := healthrec.Kinds(all); ks[0] != health.Granted || ks[len(ks)-1] != health.Lost || slices.Contains(ks, health.Released) {
		t.Fatalf("events = %v, want granted first and lost last", ks)
	}
	var le *lost.Error
	if e := all[len(all)-1]; !errors.As(e.Err, &le) || e.Err != l2.Signal().Err() || e.Via != health.Answer || !errors.Is(e.Err, s3lease.ErrDeleted) {
		t.Errorf("lost = %v via %v, want the signal's error %v via answer", e.Err, e.Via, l2.Signal().Err())
	}
	n := len(all)
	l2.Unlock(context.Background())
	if got := len(rec2.Events()); got != n {
		t.Errorf("the Unlock of a lost lease reported %d events more: %v", got-n, healthrec.Kinds(rec2.Events()[n:]))
	}
}

// TestShortTTLDefaults: a Config that sets only the shortest TTL, every
// other field zero, is refused nothing and keeps its lease: the defaults
// derive from the TTL (ClockSkew TTL/10, Margin TTL/20, RenewPeriod and
// RetryPeriod TTL/4), and with no observer the lease reports its Health
// all the same, a deadline 850 ms after each confirmed write.
func TestShortTTLDefaults(t *testing.T) {
	cfg := s3lease.Config{Bucket: bucket, TTL: s3lease.MinTTL}
	l := mustLock(t, cfg, client(t, shared.Addr()), keyName(t))
	span := 850 * time.Millisecond
	first := l.Health()
	if first.Deadline.Sub(first.Renewed) != span || first.Margin <= 0 || first.Margin > span {
		t.Errorf("Health() at the grant = %+v, want a deadline %v after the grant and a margin in (0, %v]", first, span, span)
	}
	// Two renewals confirmed after the grant's, the lease not lost.
	seen := []time.Time{first.Renewed}
	guard := time.After(time.Minute)
	for len(seen) < 3 {
		select {
		case <-l.Signal().Done():
			t.Fatalf("lost after %d confirmed writes: %v", len(seen), l.Signal().Err())
		case <-guard:
			t.Fatalf("%d confirmed writes in a minute", len(seen))
		case <-time.After(10 * time.Millisecond):
		}
		h := l.Health()
		if h.Renewed.After(seen[len(seen)-1]) {
			seen = append(seen, h.Renewed)
			if h.Deadline.Sub(h.Renewed) != span || h.Margin <= 0 {
				t.Errorf("Health() = %+v, want a deadline %v after the renewal, a margin > 0", h, span)
			}
		}
	}
}

// TestUnlockCancelledContext: an Unlock whose context has ended still
// sends its release, and says it did: nil, and a waiting Lock of another
// client, polling every 100 ms, is granted at its next read, long before
// the 60 s TTL could free the object (its own context gives up at 30 s).
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
			long := s3lease.Config{Bucket: bucket, TTL: time.Minute, RetryPeriod: 100 * time.Millisecond}
			key := keyName(t)
			a := mustLock(t, long, client(t, shared.Addr()), key)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			b := lockAsync(ctx, long, client(t, shared.Addr()), key)
			time.Sleep(time.Second) // B probes, reads the object and waits
			start := time.Now()
			if err := a.Unlock(tc.ctx()); err != nil {
				t.Fatalf("Unlock(%s context) = %v, want nil: the release went through", tc.name, err)
			}
			g := <-b
			if g.err != nil {
				t.Fatalf("B's Lock = %v, want the lease within 30 s of a 60 s TTL", g.err)
			}
			defer g.l.Unlock(context.Background())
			t.Logf("Unlock(%s context) → waiting Lock of another client granted in %v", tc.name, g.at.Sub(start))
		})
	}
}

// atRiskTrials and atRiskAtOnce: TestAtRiskBeforeLoss runs 30 trials, ten
// at a time, each with a proxy, a client (so a session) and a key of its
// own, on the shared server.
const (
	atRiskTrials = 30
	atRiskAtOnce = 10
)

// TestAtRiskBeforeLoss: a link slowed until a round trip takes 80% of the
// deadline span loses the lease by its deadline, and AtRisk is reported
// before the loss, with nothing after the Lost event, in each of 30
// trials. The warning comes when a third of the span is left with no
// renewal confirmed (the lease's health.Watch), or with a renewal
// confirmed with less than a third left, whichever is first; the loss
// comes at the deadline, so a third of the span, 567 ms of the 2 s TTL,
// separates them.
func TestAtRiskBeforeLoss(t *testing.T) {
	type result struct {
		events []health.Event
		slowed int // the index of the first event after the link was slowed
		err    error
	}
	results := make([]result, atRiskTrials)
	sem := make(chan struct{}, atRiskAtOnce)
	var wg sync.WaitGroup
	for i := range atRiskTrials {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			events, slowed, err := slowedRun(ctx, fmt.Sprintf("%s-%d", keyName(t), i), 0.8)
			results[i] = result{events, slowed, err}
		})
	}
	wg.Wait()
	sum := healthrec.Summary{Trials: atRiskTrials}
	for i, r := range results {
		if r.err != nil {
			t.Errorf("trial %d: %v; events %v", i, r.err, healthrec.Kinds(r.events))
			continue
		}
		w, err := healthrec.AtRiskBeforeLoss(r.events, healthrec.Trial{From: r.slowed})
		if err != nil {
			t.Errorf("trial %d: %v", i, err)
		} else {
			sum.Margins = append(sum.Margins, w.Margin) // the time left before the deadline, warned
		}
		if lostAt := slices.IndexFunc(r.events, func(e health.Event) bool { return e.Kind == health.Lost }); lostAt >= 0 && (r.events[lostAt].Via != health.Deadline || !errors.Is(r.events[lostAt].Err, s3lease.ErrRenewalUnconfirmed)) {
			t.Errorf("trial %d: lost via %v with %v, want via the deadline with ErrRenewalUnconfirmed", i, r.events[lostAt].Via, r.events[lostAt].Err)
		}
	}
	if r := results[0]; r.err == nil {
		t.Logf("trial 0: %v", healthrec.Kinds(r.events))
	}
	if sum.Warned() > 0 {
		t.Log(sum)
	}
}

// slowedRun holds a lease of the short Config on key through a proxy of its
// own, lets it renew twice, then delays every byte of the link by half of
// share of the deadline span each way (a round trip of share of the span),
// and waits for the loss. It releases the lease, and returns every event
// the lease's observer was told, in order, and the index of the first told
// after the link was slowed: a warning before it (a renewal slowed by a
// loaded machine) warns of nothing that follows.
func slowedRun(ctx context.Context, key string, share float64) ([]health.Event, int, error) {
	p, err := faultnet.Listen(shared.Addr())
	if err != nil {
		return nil, 0, err
	}
	defer p.Close()
	rec := &healthrec.Recorder{}
	cfg := short
	cfg.Observer = rec
	l, err := cfg.Lock(ctx, s3test.Client(p.Addr()), key)
	if err != nil {
		return nil, 0, err
	}
	for renewed := 0; renewed < 2; {
		renewed = rec.Count(health.Renewed)
		select {
		case <-rec.Notify():
		case <-l.Signal().Done():
			l.Unlock(context.Background())
			return rec.Events(), 0, fmt.Errorf("lost before the link was slowed: %w", l.Signal().Err())
		case <-ctx.Done():
			l.Unlock(context.Background())
			return rec.Events(), 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	span := short.TTL - short.TTL/10 - short.TTL/20
	slowed := len(rec.Events())
	p.Delay(time.Duration(share * float64(span) / 2))
	select {
	case <-l.Signal().Done():
	case <-ctx.Done():
		l.Unlock(context.Background())
		return rec.Events(), slowed, fmt.Errorf("the lease was not lost: %w", ctx.Err())
	}
	p.Heal()
	l.Unlock(context.Background()) // the object is released if it is still the lease's; no event follows
	// The loss is reported right after the signal is lost.
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(5 * time.Millisecond) {
		if es := rec.Events(); len(es) > 0 && es[len(es)-1].Kind == health.Lost {
			return es, slowed, nil
		}
	}
	return rec.Events(), slowed, errors.New("no Lost event after the loss")
}
