package k8slease

import (
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestReserveSumsExactly reserves and releases leases of several rates on
// one limiter, keeping one lease throughout: the account comes back to the
// kept lease exactly, so leases that fill the limiter's half to the last
// request are still taken. A running float64 sum drifts by a rounding
// error and refuses the last one.
func TestReserveSumsExactly(t *testing.T) {
	// No request is sent: reserve only reads the clientset's limiter.
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", QPS: 4, Burst: 4})
	if err != nil {
		t.Fatal(err)
	}
	rates := func(renew, retry time.Duration) Config {
		return Config{LeaseDuration: time.Minute, RenewPeriod: renew, RetryPeriod: retry, Margin: 6 * time.Second}
	}
	fifth := rates(3*time.Second, 2500*time.Millisecond) // 0.4 requests a second
	reserve := func(c Config) func() {
		t.Helper()
		unreserve, err := c.reserve(cs)
		if err != nil {
			t.Fatalf("reserve = %v, want room", err)
		}
		return unreserve.release
	}
	kept := reserve(fifth)
	defer kept()
	for range 10 {
		var undo []func()
		// 1/7, 2/3 and 1/6 of a request a second: with the kept lease,
		// within the limiter's half.
		for _, c := range []Config{rates(7*time.Second, 7*time.Second), rates(2*time.Second, 1500*time.Millisecond), rates(6*time.Second, 6*time.Second)} {
			undo = append(undo, reserve(c))
		}
		for _, u := range undo {
			u()
		}
	}
	// QPS 4 leaves 2 requests a second to leases: five of 0.4.
	for range 4 {
		defer reserve(fifth)()
	}
	if _, err := fifth.reserve(cs); err == nil {
		t.Error("a sixth lease of 0.4 requests a second on QPS 4: reserved, want a refusal")
	}
}

// taggedLimiter is a caller's own limiter: a comparable struct type whose
// interface field holds a value that cannot be compared, which no map can
// take as a key.
type taggedLimiter struct {
	flowcontrol.RateLimiter
	tag any
}

// TestReserveUncomparableLimiter: a limiter that cannot be told apart from
// another is not counted, and does not panic.
func TestReserveUncomparableLimiter(t *testing.T) {
	rl := taggedLimiter{flowcontrol.NewTokenBucketRateLimiter(1000, 1000), map[string]int{}}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", RateLimiter: rl})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Config{LeaseDuration: 2 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	unreserve, err := c.reserve(cs)
	if err != nil {
		t.Fatalf("reserve = %v, want no error", err)
	}
	unreserve.release()
}

// TestAcquirePace: the requests of waiting Locks are paced to half of what
// the held leases' renewals leave of the QPS; the pace is halved, once a
// round trip, by a request that came back slow or failed for the
// apiserver's load, never under a request a second, and doubled back by
// requests in time.
func TestAcquirePace(t *testing.T) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", QPS: 100, Burst: 100})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Config{LeaseDuration: 2 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	pace := func(s *share) float64 {
		demands.mu.Lock()
		defer demands.mu.Unlock()
		return float64(demands.m[s.rl].acquires.Limit())
	}
	held, err := c.reserve(cs)
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	waiting, err := c.reserve(cs)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.release()
	if got := pace(waiting); got != 50 {
		t.Errorf("pace with no lease held = %v, want 50 (half of QPS 100)", got)
	}
	held.hold(c) // a renewal a second
	if got := pace(waiting); got != 49.5 {
		t.Errorf("pace beside a lease renewed each second = %v, want 49.5", got)
	}
	slow := c.roundTrip() / 2
	waiting.answered(slow+time.Millisecond, slow, false)
	if got := pace(waiting); got != 49.5/2 {
		t.Errorf("pace after a slow answer = %v, want %v", got, 49.5/2)
	}
	waiting.answered(time.Hour, slow, true) // a second failure, sent within the first one's round trip
	if got := pace(waiting); got != 49.5/2 {
		t.Errorf("pace after a second cut within a round trip = %v, want %v", got, 49.5/2)
	}
	for range 20 {
		demands.mu.Lock()
		demands.m[waiting.rl].lastCut = time.Time{}
		demands.mu.Unlock()
		waiting.answered(time.Millisecond, slow, true)
	}
	if got := pace(waiting); got != 1 {
		t.Errorf("pace after many failures = %v, want 1 request a second", got)
	}
	for range 10 {
		waiting.answered(time.Millisecond, slow, false)
	}
	if got := pace(waiting); got != 49.5 {
		t.Errorf("pace after answers in time = %v, want 49.5", got)
	}
}
