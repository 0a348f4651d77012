package redislease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

// TestDemotedPrimary: an operator makes the holder's primary a replica of
// a server without the key. The full resynchronization empties it, Redis
// pushes the flush, and the holder is lost at once; its renewals would meet
// READONLY.
func TestDemotedPrimary(t *testing.T) {
	s1, s2 := redistest.StartServer(t), redistest.StartServer(t)
	key := keyName(t)
	a := mustLock(t, short, client(t, s1.Addr()), key)
	host, port, _ := strings.Cut(s2.Addr(), ":")
	if err := client(t, s1.Addr()).ReplicaOf(t.Context(), host, port).Err(); err != nil {
		t.Fatal(err)
	}
	demoted := time.Now()
	err := waitLost(t, a, short.TTL)
	if !errors.Is(err, redislease.ErrDeleted) && !errors.Is(err, redislease.ErrFailedOver) {
		t.Fatalf("Err() = %v, want ErrDeleted or ErrFailedOver", err)
	}
	t.Logf("lost %v after REPLICAOF: %v", time.Since(demoted).Round(time.Millisecond), err)
}

// TestReplicaCutStopsRenewals: with both replication links cut, renewals
// reach the primary but not the replicas, and must not move the deadline:
// the holder is lost at the deadline of its last write the replicas
// acknowledged, while every replica, any of which Sentinel may promote,
// still holds the key, and while the primary holds its renewed key.
//
// The loss is checked against the replicas' own expiry rather than against
// the time of the cut: a renewal acknowledged a millisecond before the cut
// puts the deadline a TTL less the margin after its send, which a loss
// observed a scheduler's delay later would exceed.
func TestReplicaCutStopsRenewals(t *testing.T) {
	g := redistest.StartGroup(t, 2)
	key := keyName(t)
	a := mustLock(t, short, g.FailoverClient(t), key)
	for _, l := range g.Links {
		l.Drop(faultnet.Both)
	}
	cut := time.Now()
	err := waitLost(t, a, 5*short.TTL) // a bound on a hang; the replicas' PTTL checks the time
	took := time.Since(cut)
	for i, r := range g.Replicas {
		// A replica expires the key for its readers at the absolute time
		// the primary sent it: -2 once that time has passed.
		if ttl, err := r.Client(t).PTTL(context.Background(), key).Result(); err != nil || ttl <= 0 {
			t.Errorf("replica %d's PTTL at the loss = %v, %v; want the key still there, the loss before its expiry", i, ttl, err)
		}
	}
	if !errors.Is(err, redislease.ErrRenewalUnconfirmed) {
		t.Fatalf("Err() = %v, want ErrRenewalUnconfirmed", err)
	}
	ttl, err := g.Primary.Client(t).PTTL(context.Background(), key).Result()
	if err != nil || ttl < short.TTL/2 {
		t.Errorf("the primary's PTTL = %v, %v; want the key renewed there", ttl, err)
	}
	t.Logf("lost %v after the cut; the primary still has the key for %v", took.Round(time.Millisecond), ttl)
}

// TestSentinelGrantWaitsForASettledReplica: behind Sentinel, a grant waits
// until a replica has followed the primary for the TTL; replicas that just
// reconnected (as after a failover) hold it back that long.
func TestSentinelGrantWaitsForASettledReplica(t *testing.T) {
	t.Parallel() // its time is waits, not work: it runs beside the other waiting tests
	g := redistest.StartGroup(t, 2)
	if err := g.Primary.Client(t).ClientKillByFilter(t.Context(), "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	l := mustLock(t, short, g.FailoverClient(t), keyName(t))
	if took := time.Since(killed); took < short.TTL {
		t.Errorf("granted %v after the replicas reconnected, want the TTL %v at least", took, short.TTL)
	}
	l.Unlock(context.Background())
}

// TestSentinelGrantNeedsAReplica: behind Sentinel, a primary that lists no
// replica grants nothing; a Lock cut by its context says why.
func TestSentinelGrantNeedsAReplica(t *testing.T) {
	t.Parallel() // its time is waits, not work: it runs beside the other waiting tests
	g := redistest.StartGroup(t, 2)
	for _, r := range g.Replicas {
		r.Kill()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*short.TTL)
	defer cancel()
	l, err := short.Lock(ctx, g.FailoverClient(t), keyName(t))
	if err == nil {
		l.Unlock(context.Background())
		t.Fatal("Lock granted on a primary behind Sentinel that lists no replica")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "lists 0 replicas") {
		t.Errorf("Lock = %v, want the context's deadline and the primary's 0 replicas", err)
	}
}
