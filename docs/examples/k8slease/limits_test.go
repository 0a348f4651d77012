package k8slease

import (
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

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
	unreserve()
}
