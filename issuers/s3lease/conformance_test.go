package s3lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"go.uber.org/goleak"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/s3lease"
	"github.com/zukhruf/lease/leasetest"
)

// conformance is the Config of the conformance suite: a 4 s TTL, renewed
// every second, so that an operator's delete is learnt by the next
// renewal, and a waiter that polls reads the object at least every second.
var conformance = s3lease.Config{Bucket: bucket, TTL: 4 * time.Second}

// TestConformance runs the suite every issuer runs, on the shared
// versitygw server.
func TestConformance(t *testing.T) {
	op := client(t, shared.Addr()) // the operator's client
	leasetest.Run(t, leasetest.Harness{
		NewLocker: func(t *testing.T) lease.Locker {
			return s3lease.NewLocker(client(t, shared.Addr()), conformance)
		},
		// An operator's delete of the lock object: the holder learns it
		// at its next renewal, within a RenewPeriod (1 s) and a round trip.
		Revoke: func(ctx context.Context, subject string) error {
			return op.RemoveObject(ctx, bucket, subject, minio.RemoveObjectOptions{})
		},
		// The hand-over by poll is at most the RetryPeriod (1 s) after the
		// release; 5 s, so that a loaded machine under the race detector
		// does not fail it.
		HandOver: 5 * time.Second,
		Goroutines: []goleak.Option{
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		},
	})
}
