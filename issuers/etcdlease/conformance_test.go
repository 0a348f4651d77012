package etcdlease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/leasetest"
)

// TestConformance runs the conformance suite of every issuer on an etcd
// server of its own: each Locker has a client and a session of ttl seconds
// of its own, and Revoke deletes the lock's keys, as an operator does.
func TestConformance(t *testing.T) {
	srv, op := startEtcdWithOp(t)
	// The suite counts as its own the goroutines that start after it
	// does: the server's handlers start after it is ready, and op's
	// connection at its first call. Both are up once op is answered.
	if _, err := op.Get(t.Context(), "conformance"); err != nil {
		t.Fatal(err)
	}
	leasetest.Run(t, leasetest.Harness{
		NewLocker: func(t *testing.T) lease.Locker {
			return etcdlease.NewLocker(newSession(t, srv))
		},
		Revoke: func(ctx context.Context, subject string) error {
			return deleteLock(ctx, op, subject)
		},
		// A waiter learns of the release from its watch and reads twice
		// before it is granted, and a holder learns of the deletion of its
		// key from its watch: milliseconds here. The bound is the session's
		// TTL, within which this issuer tells every loss.
		HandOver: ttl * time.Second,
	})
}

// deleteLock deletes every key of the lock named name, the holder's and the
// waiters', through op.
func deleteLock(ctx context.Context, op *clientv3.Client, name string) error {
	resp, err := op.Delete(ctx, name+"/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("no key of the lock %q to delete", name)
	}
	return nil
}
