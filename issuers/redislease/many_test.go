package redislease_test

import (
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/redislease/internal/manyleases"
)

// TestManyLeases holds 1,000 leases of one client on the shared server, as
// make bench-many-redis does with more: they share the session's two
// connections and its goroutines, none is lost while held, and an
// operator's DEL of one key loses that lease by the push, and no other.
// The figures (the time to grant, the commands a second, the heap a lease,
// the time from the DEL to the loss) are logged, not checked; the README's
// table has them from make bench-many-redis.
func TestManyLeases(t *testing.T) {
	c := manyleases.Config{
		Addr:   shared.Addr(),
		N:      1000,
		Hold:   4 * time.Second, // a renewal of each lease at least
		TTL:    3 * time.Second,
		Prefix: keyName(t) + "-",
	}
	r, err := manyleases.Lease(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(manyleases.Header)
	t.Log(r.Row())
	t.Logf("DEL of one key: its lease lost %v after the DEL returned", r.DelLoss)
	if r.FalseLosses != 0 {
		t.Errorf("%d of %d leases lost while held with no fault, one with: %s", r.FalseLosses, c.N, r.FirstLoss)
	}
	// The server's other clients are the tests' own, closed by now but
	// for the shared ones: far fewer than 16.
	if r.Conns > 16 {
		t.Errorf("%d connections on the server while holding %d leases, want at most 16", r.Conns, c.N)
	}
	if per := float64(r.Goroutines) / float64(c.N); per > 0.05 {
		t.Errorf("%d goroutines for %d leases (%.3f a lease), want at most 0.05 a lease", r.Goroutines, c.N, per)
	}
	if r.DelLoss > lossWithin {
		t.Errorf("the lease of the deleted key was lost %v after the DEL, want within %v (a push)", r.DelLoss, lossWithin)
	}
	if r.DelOthers != 0 {
		t.Errorf("the DEL of one key lost %d other leases, want none", r.DelOthers)
	}
}

// TestLockCycleDialsNothing: once a client's session is up, Lock and
// Unlock open no connection, from one goroutine and from 32 at once on
// distinct keys.
func TestLockCycleDialsNothing(t *testing.T) {
	rdb := client(t, shared.Addr())
	op := client(t, shared.Addr())
	mustLock(t, short, rdb, keyName(t)).Unlock(t.Context()) // the session dials
	before := totalConnections(t, op)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 20 {
				l, err := short.Lock(t.Context(), rdb, keyName(t))
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Unlock(t.Context()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if after := totalConnections(t, op); after != before {
		t.Errorf("640 Lock→Unlock cycles opened %d connections, want none", after-before)
	}
}
