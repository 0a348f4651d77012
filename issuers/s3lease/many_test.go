package s3lease_test

import (
	"flag"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/zukhruf/lease/issuers/s3lease"
	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"
)

// counting is an http.RoundTripper that counts the requests it carries.
type counting struct {
	http.RoundTripper
	n *atomic.Int64
}

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.RoundTripper.RoundTrip(r)
}

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
	var requests atomic.Int64
	c, err := minio.New(shared.Addr(), &minio.Options{
		Creds:     credentials.NewStaticV4(s3test.AccessKey, s3test.SecretKey, ""),
		Region:    "us-east-1",
		Transport: counting{http.DefaultTransport, &requests},
	})
	if err != nil {
		t.Fatal(err)
	}
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
	var m0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	r0 := requests.Load()
	time.Sleep(*manyHold)
	rate := float64(requests.Load()-r0) / manyHold.Seconds()
	lost := 0
	for _, l := range ls {
		if l.Signal().Err() != nil {
			lost++
		}
		l.Unlock(ctx)
	}
	t.Logf("%d leases of one client, TTL %v, held %v: granted in %v (16 goroutines), %d goroutines added, %.0f requests a second while holding (%.0f renewals due), heap in use %d B, %d lost with no fault",
		n, s3lease.DefaultTTL, *manyHold, grant.Round(time.Millisecond), added, rate, float64(n)/(s3lease.DefaultTTL/4).Seconds(), m0.HeapInuse, lost)
	if lost > 0 {
		t.Errorf("%d leases lost with no fault", lost)
	}
}
