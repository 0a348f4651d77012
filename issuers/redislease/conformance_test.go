package redislease_test

import (
	"context"
	"testing"
	"time"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/leasetest"
)

// conformance is the Config of the conformance suite: its TTL is long, so
// that a waiting Lock's retry (a quarter of it) and a renewal (a third)
// come well after the suite's HandOver. Only the push (CLIENT TRACKING)
// meets that bound: a Locker that missed a release or a deletion fails.
var conformance = redislease.Config{TTL: 30 * time.Second}

// TestConformance runs the suite every issuer runs, on the shared
// redis-server.
func TestConformance(t *testing.T) {
	op := client(t, shared.Addr()) // the operator's client
	leasetest.Run(t, leasetest.Harness{
		NewLocker: func(t *testing.T) lease.Locker {
			return redislease.NewLocker(client(t, shared.Addr()), conformance)
		},
		// An operator's DEL of the key: the holder is lost by the push;
		// the key's claim keeps the subject until the holder's Unlock
		// gives it back (see Config.Lock).
		Revoke: func(ctx context.Context, subject string) error {
			return op.Del(ctx, subject).Err()
		},
		// The stated hand-over is about a millisecond, by the push
		// (README, "When a lease is lost"); 5 s, as lossWithin, so that a
		// loaded machine under the race detector does not fail it.
		HandOver: lossWithin,
	})
}
