package health_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// record is an Observer that keeps the events.
type record []health.Event

func (r *record) Observe(e health.Event) { *r = append(*r, e) }

func (r record) kinds() []health.Kind {
	var k []health.Kind
	for _, e := range r {
		k = append(k, e.Kind)
	}
	return k
}

func TestNotifyRenewed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		roundTrip time.Duration // of a renewal whose span is 9 s
		want      []health.Kind
	}{
		{"quick", 10 * time.Millisecond, []health.Kind{health.Renewed}},
		{"two thirds, a third left", 6 * time.Second, []health.Kind{health.Renewed}},
		{"past two thirds", 6*time.Second + time.Millisecond, []health.Kind{health.Renewed, health.AtRisk}},
		{"past the deadline", 10 * time.Second, []health.Kind{health.Renewed, health.AtRisk}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r record
			health.NotifyRenewed(&r, health.Event{Subject: "orders", Sent: t0, Deadline: t0.Add(9 * time.Second)}, t0.Add(tc.roundTrip))
			if got := r.kinds(); !equal(got, tc.want) {
				t.Fatalf("kinds = %v, want %v", got, tc.want)
			}
			if got := r[0].RoundTrip; got != tc.roundTrip {
				t.Errorf("RoundTrip = %v, want %v", got, tc.roundTrip)
			}
			if got, want := r[0].Margin, 9*time.Second-tc.roundTrip; got != want {
				t.Errorf("Margin = %v, want %v", got, want)
			}
		})
	}
}

func TestNotifyFailedIsAtRisk(t *testing.T) {
	var r record
	failure := errors.New("connection reset")
	health.NotifyFailed(&r, health.Event{Subject: "orders", Deadline: t0.Add(4 * time.Second), Err: failure}, t0.Add(time.Second))
	if got, want := r.kinds(), []health.Kind{health.RenewalFailed, health.AtRisk}; !equal(got, want) {
		t.Fatalf("kinds = %v, want %v", got, want)
	}
	for _, e := range r {
		if e.Margin != 3*time.Second || e.Err != failure {
			t.Errorf("%v: Margin = %v, Err = %v, want 3s and %v", e.Kind, e.Margin, e.Err, failure)
		}
	}
}

// TestNotifyFailedPastDeadline: a failure known at or past the deadline
// tells nothing; the Lost event that follows does.
func TestNotifyFailedPastDeadline(t *testing.T) {
	var r record
	e := health.Event{Subject: "orders", Deadline: t0, Err: errors.New("i/o timeout")}
	health.NotifyFailed(&r, e, t0)
	health.NotifyFailed(&r, e, t0.Add(time.Millisecond))
	if len(r) != 0 {
		t.Errorf("a failure past the deadline told %v", r.kinds())
	}
}

func TestNotifyNilObserver(t *testing.T) {
	// Nothing to observe, nothing panics.
	e := health.Event{Subject: "orders"}
	health.NotifyGranted(nil, e)
	health.NotifyRenewed(nil, e, t0)
	health.NotifyFailed(nil, e, t0)
	health.NotifyLost(nil, e)
	health.NotifyReleased(nil, e)
}

func TestStrings(t *testing.T) {
	kinds := map[health.Kind]string{health.Granted: "granted", health.Renewed: "renewed", health.RenewalFailed: "renewal_failed",
		health.AtRisk: "at_risk", health.Lost: "lost", health.Released: "released", 0: "unknown", 99: "unknown"}
	for k, want := range kinds {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
	vias := map[health.Via]string{health.Push: "push", health.Answer: "answer", health.Deadline: "deadline", 0: "unknown", 9: "unknown"}
	for v, want := range vias {
		if got := v.String(); got != want {
			t.Errorf("Via(%d).String() = %q, want %q", v, got, want)
		}
	}
}

func TestHealthLeft(t *testing.T) {
	if got := (health.Health{}).Left(t0); got != 0 {
		t.Errorf("zero Health: Left = %v, want 0", got)
	}
	h := health.Health{Deadline: t0.Add(time.Second), Renewed: t0.Add(-time.Second), Margin: 1500 * time.Millisecond}
	if got := h.Left(t0); got != time.Second {
		t.Errorf("Left = %v, want 1s", got)
	}
	if got := h.Left(t0.Add(3 * time.Second)); got != -2*time.Second {
		t.Errorf("Left past the deadline = %v, want -2s", got)
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	o := health.Logger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	c := controller.New("orders")
	c.Lose(errors.New("key deleted"))
	health.NotifyGranted(o, health.Event{Issuer: "redislease", Subject: "orders", Token: 7, Wait: 3 * time.Millisecond})
	health.NotifyRenewed(o, health.Event{Issuer: "redislease", Subject: "orders", Token: 7, Sent: t0, Deadline: t0.Add(9 * time.Second)}, t0.Add(8*time.Second))
	health.NotifyLost(o, health.Event{Issuer: "redislease", Subject: "orders", Token: 7, Err: c.Signal().Err(), Via: health.Push})
	out := buf.String()
	for _, want := range []string{
		`level=INFO msg="lease granted" lease.issuer=redislease lease.subject=orders lease.token=7 lease.wait=3ms`,
		`level=DEBUG msg="lease renewed" lease.issuer=redislease lease.subject=orders lease.token=7 lease.round_trip=8s lease.margin=1s`,
		`level=WARN msg="lease at_risk" lease.issuer=redislease lease.subject=orders lease.token=7 lease.margin=1s`,
		`level=ERROR msg="lease lost" lease.issuer=redislease lease.subject=orders lease.token=7 lease.via=push lease.lost.subject=orders lease.lost.cause="key deleted"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log has no line with %s:\n%s", want, out)
		}
	}
}

func TestLoggerLevel(t *testing.T) {
	var buf bytes.Buffer
	o := health.Logger(slog.New(slog.NewTextHandler(&buf, nil))) // Info and above
	health.NotifyRenewed(o, health.Event{Subject: "orders", Sent: t0, Deadline: t0.Add(9 * time.Second)}, t0.Add(time.Millisecond))
	if buf.Len() != 0 {
		t.Errorf("a quick renewal was logged at Info: %s", buf.String())
	}
}

// TestAllocs pins what an issuer pays at each event site: nothing with no
// observer, and nothing of its own with one (the event is passed by value).
func TestAllocs(t *testing.T) {
	sig := controller.New("orders")
	sig.Lose(errors.New("key deleted"))
	e := health.Event{Issuer: "redislease", Subject: "orders", Token: 7, Sent: t0, Deadline: t0.Add(9 * time.Second), Err: sig.Signal().Err()}
	var count int
	counter := health.ObserverFunc(func(health.Event) { count++ })
	for _, tc := range []struct {
		name string
		o    health.Observer
	}{{"nil", nil}, {"func", counter}} {
		for name, f := range map[string]func(){
			"granted":  func() { health.NotifyGranted(tc.o, e) },
			"renewed":  func() { health.NotifyRenewed(tc.o, e, t0.Add(8*time.Second)) },
			"failed":   func() { health.NotifyFailed(tc.o, e, t0) },
			"lost":     func() { health.NotifyLost(tc.o, e) },
			"released": func() { health.NotifyReleased(tc.o, e) },
		} {
			if got := testing.AllocsPerRun(1000, f); got != 0 {
				t.Errorf("%s/%s: %v allocations, want 0", tc.name, name, got)
			}
		}
	}
}

func equal(a, b []health.Kind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCause(t *testing.T) {
	deleted := errors.New("redislease: key deleted")
	unconfirmed := errors.New("etcdlease: renewal unconfirmed")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"sentinel", deleted, "key deleted"},
		{"wrapped first", fmt.Errorf("%w: the renewal sent at 12:00:00.000 found no key", deleted), "key deleted"},
		{"two wraps", fmt.Errorf("%w: %s: %w", unconfirmed, "the last renewal", errors.New("x")), "renewal unconfirmed"},
		{"in a lost.Error", lostErr("orders", fmt.Errorf("%w: the read after a push", deleted)), "key deleted"},
		{"an address", errors.New("dial tcp 127.0.0.1:6379: connection refused"), "connection refused"},
		{"digits", errors.New("no answer in 3s"), "other"},
		{"no prefix", errors.New("flight forgotten"), "flight forgotten"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := health.Cause(tc.err); got != tc.want {
				t.Errorf("Cause(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func lostErr(subject string, cause error) error {
	c := controller.New(subject)
	c.Lose(cause)
	return c.Signal().Err()
}
