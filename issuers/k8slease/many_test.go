package k8slease_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/k8slease"
)

// TestManyLeasesShareOneWatch holds 100 leases through one clientset: it
// opens one watch for all of them, its goroutines grow by far less than one
// a lease, renewals keep every lease, an operator's deletion of one Lease
// loses that lease and no other, and 99 Locks of another clientset that
// wait for the Leases share one watch too and are all granted at the
// release.
func TestManyLeasesShareOneWatch(t *testing.T) {
	const n, deleted = 100, 7
	cfg := k8slease.Config{LeaseDuration: 12 * time.Second} // a renewal each 2 s: 50 a second in all
	var cnt counter
	cs := counted(t, shared.Config(), &cnt)
	base := leaseName(t)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", base, i)
	}
	before := runtime.NumGoroutine()
	held := make([]*k8slease.Lease, n)
	for i := range held {
		held[i] = mustLock(t, cfg, cs, names[i], "a")
	}
	grew := runtime.NumGoroutine() - before
	time.Sleep(5 * time.Second) // two renewals of each lease, or more
	for i, l := range held {
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("lease %d lost with no fault: %v", i, err)
		}
	}
	got := cnt.take()
	t.Logf("%d leases: %d more goroutines; requests: %v", n, grew, got)
	if got["WATCH"] != 1 {
		t.Errorf("%d leases of one clientset opened %d watches, want 1", n, got["WATCH"])
	}
	if grew >= n/2 {
		t.Errorf("%d leases started %d goroutines, want far fewer than one a lease", n, grew)
	}

	admin := clientset(t, shared.Config())
	if err := admin.CoordinationV1().Leases(ns).Delete(t.Context(), names[deleted], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deletedAt := time.Now()
	err := waitLost(t, held[deleted], 30*time.Second)
	t.Logf("the deleted Lease's lease lost after %v: %v", time.Since(deletedAt).Round(time.Millisecond), err)
	if !isLost(err, k8slease.ErrDeleted) {
		t.Errorf("Err() = %v, want ErrDeleted", err)
	}

	var wcnt counter
	wcs := counted(t, shared.Config(), &wcnt)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	waits := make([]<-chan granted, n)
	for i := range waits {
		if i != deleted {
			waits[i] = lockAsync(ctx, cfg, wcs, names[i], "b")
		}
	}
	time.Sleep(time.Second) // the waiting Locks read their Leases
	for i, l := range held {
		if i != deleted {
			if err := l.Signal().Err(); err != nil {
				t.Errorf("lease %d lost with the deletion of another: %v", i, err)
			}
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Errorf("Unlock %d: %v", i, err)
		}
	}
	for i, c := range waits {
		if c == nil {
			continue
		}
		g := <-c
		if g.err != nil {
			t.Errorf("waiting Lock %d = %v", i, g.err)
			continue
		}
		g.l.Unlock(t.Context())
	}
	w := wcnt.take()
	t.Logf("%d waiting Locks: requests %v", n-1, w)
	if w["WATCH"] != 1 {
		t.Errorf("%d waiting Locks of one clientset opened %d watches, want 1", n-1, w["WATCH"])
	}
}

// TestLocksWaitBehindRenewals holds leases on a clientset of QPS 10 while
// 64 goroutines try to take their Leases again and again with TryLock
// through the same clientset, for three lease durations: far more requests
// than client-go's limiter lets through. The held leases' renewals go
// first, so no held lease is lost, and the TryLocks are answered
// (lease.ErrHeld) all along, at the pace the renewals leave.
func TestLocksWaitBehindRenewals(t *testing.T) {
	const held, tries = 3, 64
	cfg := shared.Config()
	cfg.QPS, cfg.Burst = 10, 10
	cs := clientset(t, cfg)
	holderCfg := k8slease.Config{LeaseDuration: 4 * time.Second} // a renewal a second, 2.6 s for its round trip
	// An hour's lease reserves a request each 10 minutes: the rate limit
	// admits every TryLock, and only the pace of their requests bounds them.
	tryCfg := k8slease.Config{LeaseDuration: time.Hour}
	holder := k8slease.NewLocker(cs, ns, "holder", holderCfg)
	base := leaseName(t)
	var leases []lease.Lease
	for i := range held {
		l, err := holder.Lock(t.Context(), fmt.Sprintf("%s-%d", base, i))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(context.Background())
		leases = append(leases, l)
	}
	other := k8slease.NewLocker(cs, ns, "other", tryCfg)
	ctx, cancel := context.WithTimeout(t.Context(), 3*holderCfg.LeaseDuration)
	defer cancel()
	var answered, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range tries {
		wg.Go(func() {
			for i := g; ctx.Err() == nil; i++ {
				l, err := other.TryLock(ctx, fmt.Sprintf("%s-%d", base, i%held))
				switch {
				case err == nil:
					l.Unlock(context.Background())
					t.Errorf("TryLock took a held Lease")
				case errors.Is(err, lease.ErrHeld):
					answered.Add(1)
				case ctx.Err() == nil:
					failed.Add(1)
					t.Errorf("TryLock = %v, want lease.ErrHeld", err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d TryLocks answered lease.ErrHeld in %v beside %d held leases", answered.Load(), 3*holderCfg.LeaseDuration, held)
	for i, l := range leases {
		if err := l.Signal().Err(); err != nil {
			t.Errorf("held lease %d lost while Locks crowded its clientset: %v", i, err)
		}
	}
	if answered.Load() == 0 {
		t.Error("no TryLock was answered")
	}
}
