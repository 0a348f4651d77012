package redislease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/lost"
)

// TestObserverEvents: a lease's observer is told of its grant, its
// renewals in order with their margins, and its release; another's, of its
// grant and its loss, with the *lost.Error and how it was learned.
func TestObserverEvents(t *testing.T) {
	rdb := client(t, shared.Addr())
	rec := &healthrec.Recorder{}
	cfg := redislease.Config{TTL: time.Second, Observer: rec}
	key := keyName(t)
	l := mustLock(t, cfg, rdb, key)
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
		if !e.Sent.After(last) || e.Margin <= 0 || e.Deadline.Sub(e.Sent) != 900*time.Millisecond {
			t.Errorf("renewed: sent %v after %v, margin %v, deadline %v after the send; want later sends, a margin > 0, TTL less margin",
				e.Sent, last, e.Margin, e.Deadline.Sub(e.Sent))
		}
		last = e.Sent
	}
	if g := all[0]; g.Subject != key || g.Token != l.Token() || g.Issuer != "redislease" || g.Wait <= 0 {
		t.Errorf("granted = %+v, want subject %q, token %d, a wait", g, key, l.Token())
	}
	if h.Deadline.Sub(h.Renewed) != 900*time.Millisecond || h.Margin <= 0 || h.Margin > 900*time.Millisecond {
		t.Errorf("Health() = %+v, want a deadline 900 ms after the renewal and a margin in (0, 900 ms]", h)
	}

	// A loss, pushed: the key deleted by another client.
	rec2 := &healthrec.Recorder{}
	l2 := mustLock(t, redislease.Config{TTL: 10 * time.Second, Observer: rec2}, rdb, key)
	if err := client(t, shared.Addr()).Del(t.Context(), key).Err(); err != nil {
		t.Fatal(err)
	}
	waitLost(t, l2, time.Minute)
	all = rec2.WaitFor(t, health.Lost, 1)
	if got, want := healthrec.Kinds(all), []health.Kind{health.Granted, health.Lost}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	var le *lost.Error
	if e := all[1]; !errors.As(e.Err, &le) || e.Err != l2.Signal().Err() || e.Via != health.Push {
		t.Errorf("lost = %v via %v, want the signal's error %v via push", e.Err, e.Via, l2.Signal().Err())
	}
	l2.Unlock(context.Background())
	if got := len(rec2.Events()); got != 2 {
		t.Errorf("the Unlock of a lost lease reported %d events more", got-2)
	}
}

// TestObserverNilHealth: a lease with no observer has its Health all the
// same.
func TestObserverNilHealth(t *testing.T) {
	rdb := client(t, shared.Addr())
	l := mustLock(t, short, rdb, keyName(t))
	h := l.Health()
	if h.Deadline.Sub(h.Renewed) != 1800*time.Millisecond || h.Margin <= 0 {
		t.Errorf("Health() = %+v with no observer, want a deadline 1.8 s after the grant", h)
	}
}

// TestUnlockCancelledContext: an Unlock whose context has ended still
// sends its release, and says it did: nil, and a waiting Lock is granted
// at once, long before the 10 s TTL could free the key.
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
			slow := redislease.Config{TTL: 10 * time.Second, RetryPeriod: 10 * time.Second}
			l := mustLock(t, slow, client(t, shared.Addr()), key)
			b := lockAsync(t.Context(), slow, client(t, shared.Addr()), key)
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
