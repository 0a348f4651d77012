package k8slease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
	"github.com/zukhruf/lease/leasetest"
)

// TestConformance runs the suite of every issuer on the shared apiserver:
// each Locker has a clientset and an identity of its own, with the zero
// Config (a 15 s lease), and an operator revokes a lease by deleting its
// Lease object.
func TestConformance(t *testing.T) {
	op := clientset(t, shared.Config())
	var ids atomic.Int64
	leasetest.Run(t, leasetest.Harness{
		NewLocker: func(t *testing.T) lease.Locker {
			id := fmt.Sprintf("leasetest-%d", ids.Add(1))
			return k8slease.NewLocker(clientset(t, shared.Config()), ns, id, k8slease.Config{})
		},
		Revoke: func(ctx context.Context, subject string) error {
			return op.CoordinationV1().Leases(ns).Delete(ctx, subject, metav1.DeleteOptions{})
		},
		// A release and a deletion reach the waiter's and the holder's
		// watch at once (the README's TestMutualExclusion figure); a
		// watch event missed is caught by the waiter's next read, a
		// RetryPeriod (2.5 s at a 15 s lease) later, or by the holder's
		// next renewal, a RenewPeriod (2 s) later. The rest is the load
		// of a 2-core machine.
		HandOver: 10 * time.Second,
		// The goroutines of the etcd server that stores the apiserver's
		// objects in this process, and client-go's idle connections to
		// the apiserver, which the operator's clientset keeps until the
		// test's cleanup, after the suite's check. Its watches and
		// requests stay reported.
		Goroutines: kubetest.IgnoreGoroutines(),
	})
}
