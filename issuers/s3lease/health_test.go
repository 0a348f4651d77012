package s3lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/s3lease"
)

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
