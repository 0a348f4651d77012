package natslease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
	"github.com/zukhruf/lease/lost"
)

// TestObserverEvents: a lease's observer is told of its grant, its
// renewals in order with their margins, and its release; another's, of its
// grant and its loss, with the *lost.Error and how it was learned. The
// first lease has a 1 s TTL and every other field zero: the defaults
// derived from it renew in time.
func TestObserverEvents(t *testing.T) {
	nc := client(t, shared.URL(natstest.App))
	rec := &healthrec.Recorder{}
	cfg := natslease.Config{TTL: time.Second, Observer: rec}
	key := keyName(t)
	l := mustLock(t, cfg, nc, key)
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
	var last time.Time
	for _, e := range renewals {
		if !e.Sent.After(last) || e.Margin <= 0 || e.Deadline.Sub(e.Sent) != 900*time.Millisecond || e.RoundTrip <= 0 {
			t.Errorf("renewed: sent %v after %v, margin %v, round trip %v, deadline %v after the send; want later sends, a margin > 0, a round trip, TTL less margin",
				e.Sent, last, e.Margin, e.RoundTrip, e.Deadline.Sub(e.Sent))
		}
		last = e.Sent
	}
	if g := all[0]; g.Subject != key || g.Token != l.Token() || g.Issuer != "natslease" || g.Wait <= 0 {
		t.Errorf("granted = %+v, want subject %q, token %d, a wait", g, key, l.Token())
	}
	if r := all[len(all)-1]; r.Err != nil || r.Token != l.Token() {
		t.Errorf("released = %+v, want no error and token %d", r, l.Token())
	}
	if h.Deadline.Sub(h.Renewed) != 900*time.Millisecond || h.Margin <= 0 || h.Margin > 900*time.Millisecond {
		t.Errorf("Health() = %+v, want a deadline 900 ms after the renewal and a margin in (0, 900 ms]", h)
	}

	// A loss, pushed: the key deleted by another client.
	rec2 := &healthrec.Recorder{}
	l2 := mustLock(t, natslease.Config{TTL: 10 * time.Second, Observer: rec2}, nc, key)
	op := bucket(t, client(t, shared.URL(natstest.App)), natslease.DefaultBucket)
	if err := op.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	waitLost(t, l2, lossWithin)
	all = rec2.WaitFor(t, health.Lost, 1)
	if got, want := healthrec.Kinds(all), []health.Kind{health.Granted, health.Lost}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	var le *lost.Error
	if e := all[1]; !errors.As(e.Err, &le) || e.Err != l2.Signal().Err() || e.Via != health.Push || !errors.Is(e.Err, natslease.ErrDeleted) {
		t.Errorf("lost = %v via %v, want the signal's error %v via push", e.Err, e.Via, l2.Signal().Err())
	}
	l2.Unlock(context.Background())
	if got := len(rec2.Events()); got != 2 {
		t.Errorf("the Unlock of a lost lease reported %d events more", got-2)
	}
}

// TestObserverRenewalFailed: a renewal that fails while the session's
// connection is cut is told as RenewalFailed, with its error and the time
// left, then AtRisk; the lease renews again once the session has
// reconnected, and its release comes last.
func TestObserverRenewalFailed(t *testing.T) {
	proxy, err := faultnet.Listen(shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	rec := &healthrec.Recorder{}
	l := mustLock(t, natslease.Config{TTL: 2 * time.Second, Observer: rec}, client(t, "nats://app:app@"+proxy.Addr()), keyName(t))
	failed := func() int {
		for i, e := range rec.Events() {
			if e.Kind == health.RenewalFailed {
				return i
			}
		}
		return -1
	}
	// Cut the session's connection until a renewal fails on it.
	for failed() < 0 {
		proxy.Cut()
		select {
		case <-rec.Notify():
		case <-l.Signal().Done():
			t.Fatalf("the lease was lost before a renewal failed: %v", l.Signal().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	i := failed()
	rec.WaitFor(t, health.Renewed, rec.Count(health.Renewed)+1)
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := rec.Events()
	f := all[i]
	t.Logf("renewal failed with %v left: %v", f.Margin, f.Err)
	if f.Err == nil || f.Sent.IsZero() || f.Deadline.IsZero() || f.Margin > 1800*time.Millisecond {
		t.Errorf("renewal failed = %+v, want its error, its send time, the deadline and the time left", f)
	}
	if i+1 >= len(all) || all[i+1].Kind != health.AtRisk {
		t.Errorf("events = %v, want AtRisk right after the RenewalFailed at %d", healthrec.Kinds(all), i)
	}
	if last := all[len(all)-1]; last.Kind != health.Released || healthrec.Count(all, health.Lost) != 0 {
		t.Errorf("events = %v, want no loss and the release last", healthrec.Kinds(all))
	}
}

// TestObserverNilHealth: a lease with no observer has its Health all the
// same.
func TestObserverNilHealth(t *testing.T) {
	l := mustLock(t, short, client(t, shared.URL(natstest.App)), keyName(t))
	h := l.Health()
	if h.Deadline.Sub(h.Renewed) != 1800*time.Millisecond || h.Margin <= 0 || h.Margin > 1800*time.Millisecond {
		t.Errorf("Health() = %+v with no observer, want a deadline 1.8 s after the grant", h)
	}
}

// TestUnlockCancelledContext: an Unlock whose context has ended still
// sends its release, and says it did: nil, and a waiting Lock of another
// client is granted at once, long before the 10 s TTL could free the key.
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
			key := keyName(t)
			slow := natslease.Config{TTL: 10 * time.Second, RetryPeriod: 10 * time.Second}
			l := mustLock(t, slow, client(t, shared.URL(natstest.App)), key)
			b := lockAsync(t.Context(), slow, client(t, shared.URL(natstest.App)), key)
			time.Sleep(50 * time.Millisecond) // B waits
			start := time.Now()
			if err := l.Unlock(tc.ctx()); err != nil {
				t.Fatalf("Unlock(%s context) = %v, want nil: the release went through", tc.name, err)
			}
			g := <-b
			if g.err != nil {
				t.Fatal(g.err)
			}
			defer g.l.Unlock(context.Background())
			took := g.at.Sub(start)
			t.Logf("Unlock(%s context) → waiting Lock granted in %v", tc.name, took)
			if took >= 5*time.Second {
				t.Errorf("the waiting Lock was granted %v after the Unlock: by the key's expiry, not the release", took)
			}
		})
	}
}

// slowedTTL is the TTL of a slowed-link trial: its deadline span is the
// TTL less the default margin of a tenth, 1.8 s.
const slowedTTL = 2 * time.Second

// errLostEarly is a slowed-link trial's lease lost before the link was
// slowed: its first renewals were not confirmed in time on a loaded
// machine, and the trial is run again.
var errLostEarly = errors.New("the lease was lost before the link was slowed")

// slowedRun holds a lease on key through a proxy of its own, lets it renew
// twice, then delays every byte of the link by half of share of the
// deadline span each way (a round trip of share of the span), and waits
// for the loss; then it releases the lease. It returns every event, in
// order, and how many had come when the link was slowed.
func slowedRun(t *testing.T, key string, share float64) (events []health.Event, slowed int, err error) {
	proxy, err := faultnet.Listen(shared.Addr())
	if err != nil {
		return nil, 0, err
	}
	defer proxy.Close()
	nc := client(t, "nats://app:app@"+proxy.Addr())
	defer nc.Close()
	rec := &healthrec.Recorder{}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := natslease.Config{TTL: slowedTTL, Observer: rec}.Lock(ctx, nc, key)
	if err != nil {
		return nil, 0, err
	}
	defer l.Unlock(context.Background())
	guard := time.NewTimer(30 * time.Second)
	defer guard.Stop()
	for renewed := 0; renewed < 2; {
		select {
		case <-rec.Notify():
		case <-l.Signal().Done():
		case <-guard.C:
			return rec.Events(), 0, fmt.Errorf("%d renewals confirmed within 30 s, want 2", renewed)
		}
		renewed = rec.Count(health.Renewed)
		if l.Signal().Err() != nil {
			err := awaitLost(rec)
			return rec.Events(), 0, errors.Join(errLostEarly, err)
		}
	}
	span := slowedTTL - slowedTTL/10
	slowed = len(rec.Events())
	if l.Signal().Err() != nil {
		err := awaitLost(rec)
		return rec.Events(), 0, errors.Join(errLostEarly, err)
	}
	proxy.Delay(time.Duration(share * float64(span) / 2))
	select {
	case <-l.Signal().Done():
	case <-time.After(30 * time.Second):
		return rec.Events(), slowed, errors.New("the lease was not lost within 30 s of the slowed link")
	}
	proxy.Heal()
	// The loss is reported right after the signal is lost.
	err = awaitLost(rec)
	l.Unlock(context.Background())
	return rec.Events(), slowed, err
}

// awaitLost waits for rec's Lost event, at most 10 s.
func awaitLost(rec *healthrec.Recorder) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := rec.Await(ctx, health.Lost, 1)
	return err
}

// TestAtRiskBeforeLoss: a link slowed until a round trip takes 80% of the
// deadline span loses the lease by its deadline, and AtRisk is reported
// after the link was slowed and before the loss, with nothing after the
// loss, in each of 30 trials. The trials run ten at a time, each with its
// own proxy, client, session and key: the warning comes at two thirds of
// the span at the latest, the loss at the deadline, a third of the span
// (600 ms) later. A trial whose lease was lost before the link was slowed
// (no renewal confirmed within the span on a loaded machine) is checked
// all the same and run again, three times at most.
func TestAtRiskBeforeLoss(t *testing.T) {
	const trials, atOnce, tries = 30, 10, 3
	type result struct {
		events []health.Event
		slowed int
		err    error
		early  int // runs lost before the link was slowed
	}
	results := make([]result, trials)
	var wg sync.WaitGroup
	sem := make(chan struct{}, atOnce)
	for i := range trials {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var r result
			for range tries {
				r.events, r.slowed, r.err = slowedRun(t, fmt.Sprintf("%s-%d", keyName(t), i), 0.8)
				if !errors.Is(r.err, errLostEarly) {
					break
				}
				r.early++
				// A Lost event that came is checked; one that did not
				// is the error of the run.
				if healthrec.Count(r.events, health.Lost) > 0 {
					if _, err := healthrec.AtRiskBeforeLoss(r.events, healthrec.Trial{}); err != nil {
						t.Errorf("trial %d, lost before the link was slowed: %v", i, err)
					}
				}
			}
			results[i] = r
		})
	}
	wg.Wait()
	early := 0
	sum := healthrec.Summary{Trials: trials}
	for i, r := range results {
		early += r.early
		if r.err != nil {
			t.Errorf("trial %d: %v (events %v)", i, r.err, healthrec.Kinds(r.events))
			continue
		}
		w, err := healthrec.AtRiskBeforeLoss(r.events, healthrec.Trial{From: r.slowed})
		if err != nil {
			t.Errorf("trial %d: %v", i, err)
		} else {
			sum.Margins = append(sum.Margins, w.Margin) // the time left before the deadline, warned
		}
		lostAt := r.events[len(r.events)-1]
		if lostAt.Kind != health.Lost || lostAt.Via != health.Deadline || !errors.Is(lostAt.Err, natslease.ErrRenewalUnconfirmed) {
			t.Errorf("trial %d: last event %v = %v via %v, want ErrRenewalUnconfirmed via the deadline", i, lostAt.Kind, lostAt.Err, lostAt.Via)
		}
	}
	if sum.Warned() > 0 {
		t.Logf("%v; %d runs lost before the link was slowed, run again", sum, early)
	}
}
