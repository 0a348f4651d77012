package natslease_test

import (
	"context"
	"testing"
	"time"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
	"github.com/zukhruf/lease/leasetest"
)

// conformance is the Config of the conformance suite: its TTL is long, so
// that a waiting Lock's retry (a quarter of it) and a renewal (a third)
// come well after the suite's HandOver. Only the push (the session's KV
// watcher) meets that bound: a Locker that missed a release or a deletion
// fails.
var conformance = natslease.Config{TTL: 30 * time.Second}

// TestConformance runs the suite every issuer runs, on the shared
// nats-server.
func TestConformance(t *testing.T) {
	op := bucket(t, client(t, shared.URL(natstest.App)), natslease.DefaultBucket) // the operator's
	leasetest.Run(t, leasetest.Harness{
		NewLocker: func(t *testing.T) lease.Locker {
			return natslease.NewLocker(client(t, shared.URL(natstest.App)), conformance)
		},
		// An operator's delete of the key: the holder is lost by the
		// push, and the key is free.
		Revoke: func(ctx context.Context, subject string) error {
			return op.Delete(ctx, subject)
		},
		// The hand-over is milliseconds, by the push; 5 s, as lossWithin,
		// so that a loaded machine under the race detector does not fail
		// it.
		HandOver: lossWithin,
	})
}

// TestConformanceCluster runs the suite on a cluster of three with the
// bucket at R3, where the server refuses a write at a stale revision with
// another error code (10164) than a single server's (10071).
func TestConformanceCluster(t *testing.T) {
	c := natstest.StartClusterT(t)
	url := c.URL(natstest.App)
	if err := createBucket(url, natslease.DefaultBucket, 3); err != nil {
		t.Fatal(err)
	}
	op := bucket(t, client(t, url), natslease.DefaultBucket)
	leasetest.Run(t, leasetest.Harness{
		NewLocker: func(t *testing.T) lease.Locker {
			return natslease.NewLocker(client(t, url), conformance)
		},
		Revoke: func(ctx context.Context, subject string) error {
			return op.Delete(ctx, subject)
		},
		HandOver: lossWithin,
	})
}
