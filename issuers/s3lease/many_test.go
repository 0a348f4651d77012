package s3lease_test

import (
	"flag"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/s3lease"
)

var (
	manyLeases = flag.Int("many.leases", 0, "leases TestHoldMany holds on one client; 0 skips it")
	manyHold   = flag.Duration("many.hold", 60*time.Second, "how long TestHoldMany holds them")
)

// TestHoldMany holds -many.leases leases of one client for -many.hold on
// the shared server (TTL 15 s, the default Config) and logs what they
// cost: the time to grant them all, the goroutines they added, the
// renewals a second, and the leases lost with no fault, which must be
// none. make bench-many-s3 runs it with 1,000 leases for 60 s.
func TestHoldMany(t *testing.T) {
	n := *manyLeases
	if n == 0 {
		t.Skip("-many.leases is 0")
	}
	ctx := t.Context()
	c := client(t, shared.Addr())
	cfg := s3lease.Config{Bucket: bucket}
	mustLock(t, cfg, c, keyName(t)) // the probe
	before := runtime.NumGoroutine()
	start := time.Now()
	ls := make([]*s3lease.Lease, n)
	var next atomic.Int64
	done := make(chan struct{})
	for range 16 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				l, err := cfg.Lock(ctx, c, keyName(t))
				if err != nil {
					t.Error(err)
					return
				}
				ls[i] = l
			}
		}()
	}
	for range 16 {
		<-done
	}
	if t.Failed() {
		return
	}
	grant := time.Since(start)
	added := runtime.NumGoroutine() - before
	time.Sleep(*manyHold)
	lost := 0
	for _, l := range ls {
		if l.Signal().Err() != nil {
			lost++
		}
		l.Unlock(ctx)
	}
	t.Logf("%d leases of one client, TTL %v, held %v: granted in %v (16 goroutines), %d goroutines added, %.0f renewals due a second (each lease every TTL/4), %d lost with no fault",
		n, s3lease.DefaultTTL, *manyHold, grant.Round(time.Millisecond), added, float64(n)/(s3lease.DefaultTTL/4).Seconds(), lost)
	if lost > 0 {
		t.Errorf("%d leases lost with no fault", lost)
	}
}
