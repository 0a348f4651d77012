package k8slease

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		b    backoff
		want []time.Duration
	}{
		{"to 2 s", backoff{}, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms}},
		{"to 1 s", backoff{max: time.Second}, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.b
			for i, want := range tt.want {
				if got := b.pause(); got != want {
					t.Fatalf("pause %d = %v, want %v", i, got, want)
				}
			}
			b.reset()
			if got := b.pause(); got != 100*ms {
				t.Errorf("pause after reset = %v, want 100ms", got)
			}
		})
	}
}

// TestRetryBefore: a failed renewal's pause is the backoff's, but at most
// half the time left before the deadline: after a failure 5 ms into a
// lease of 2 s (800 ms to its deadline), the tries come at +105, +305,
// +552, +676, +738, +769, +794 ms, not only at +105, +305 and +705 ms.
func TestRetryBefore(t *testing.T) {
	ms := time.Millisecond
	b := backoff{max: renewRetryMax}
	at, deadline := 5*ms, 800*ms
	var tries []time.Duration
	for at < deadline {
		at += retryBefore(&b, deadline-at)
		tries = append(tries, at)
	}
	want := []time.Duration{105 * ms, 305 * ms, 552500 * time.Microsecond, 676250 * time.Microsecond, 738125 * time.Microsecond, 769062500, 794062500, 819062500}
	if len(tries) != len(want) {
		t.Fatalf("tries at %v, want at %v", tries, want)
	}
	for i := range want {
		if tries[i] != want[i] {
			t.Fatalf("tries at %v, want at %v", tries, want)
		}
	}
	if got := retryBefore(&backoff{max: renewRetryMax}, time.Hour); got != 100*ms {
		t.Errorf("first pause with an hour left = %v, want the backoff's 100ms", got)
	}
}

// TestRenewalRetriesAtMostASecondApart: a lease whose renewals fail (500)
// tries again at most renewRetryMax after each failure, however many came
// before, while its deadline is far.
func TestRenewalRetriesAtMostASecondApart(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd is slow"))
	})
	l := testLease("retries")
	l.cfg = Config{LeaseDuration: 15 * time.Second, Margin: 1500 * time.Millisecond}
	l.leases = cs.CoordinationV1().Leases("default")
	l.cur = record("retries", 1, "a")
	l.rctx = context.Background()
	l.deadline.start(l.cfg, time.Now(), func(error) {})
	defer l.deadline.stop()
	for i := range 8 {
		next, ok := l.renewOnce()
		if !ok {
			t.Fatalf("renewal %d: renewOnce() = false, want a retry", i)
		}
		// The pause was taken before now: load only shortens what is left.
		if left := time.Until(next); left > renewRetryMax {
			t.Fatalf("renewal %d failed: next try in %v, want at most %v", i, left.Round(time.Millisecond), renewRetryMax)
		}
	}
}
