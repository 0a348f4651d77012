package redislease_test

import (
	"context"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

// TestCluster: on a Cluster, a key with a hash tag and one without are
// locked, handed over and deleted as on one server; the token counter
// shares the key's slot, so the grant script may write both.
func TestCluster(t *testing.T) {
	t.Parallel() // its time is waits, not work: it runs beside the other waiting tests
	c := redistest.StartCluster(t)
	for _, tc := range []struct{ key, counter string }{
		{"orders", "{orders}:redislease-token"},
		{"{user:1}:orders", "{user:1}:orders:redislease-token"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			cl := c.Client(t)
			ks, _ := cl.ClusterKeySlot(t.Context(), tc.key).Result()
			cs, _ := cl.ClusterKeySlot(t.Context(), tc.counter).Result()
			if ks != cs {
				t.Fatalf("slots of %s and %s: %d and %d, want one", tc.key, tc.counter, ks, cs)
			}
			a := mustLock(t, short, cl, tc.key)
			b := lockAsync(t.Context(), short, c.Client(t), tc.key)
			time.Sleep(100 * time.Millisecond)
			start := time.Now()
			if err := a.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
			g := <-b
			if g.err != nil {
				t.Fatal(g.err)
			}
			t.Logf("Unlock → waiting Lock granted in %v", g.at.Sub(start))
			if g.l.Token() <= a.Token() {
				t.Errorf("B's token %d, not above A's %d", g.l.Token(), a.Token())
			}
			if n, err := cl.Get(t.Context(), tc.counter).Int64(); err != nil || n != g.l.Token() {
				t.Errorf("the counter %s = %d, %v; want B's token %d", tc.counter, n, err, g.l.Token())
			}
			if err := cl.Del(t.Context(), tc.key).Err(); err != nil {
				t.Fatal(err)
			}
			if err := waitLost(t, g.l, lossWithin); !errors.Is(err, redislease.ErrDeleted) {
				t.Fatalf("Err() = %v, want ErrDeleted", err)
			}
			g.l.Unlock(context.Background())
		})
	}
}

var clusterTrials = flag.Int("cluster.trials", 1, "trials of each slot move of TestClusterWaiterFollowsTheSlot")

// TestClusterWaiterFollowsTheSlot: a Lock waiting on a Cluster while the
// key's slot moves to another primary, by a migration or by a failover to
// the replica, is woken by the release when the holder, which keeps its
// lease across the move, calls Unlock: it tracks the key on the slot's new
// primary, not on the old one.
//
// The waiter hears of a migration from the key's move itself, and of a
// failover from the holder's first renewal on the new primary, which the
// old one, now its replica, pushes to it: the holder renews every second,
// and calls Unlock three renewal periods after the move. The TTL and the
// waiter's retry period are 10 s, so a waiter that slept until either
// would be granted seconds after the Unlock: it sleeps 9 s at least from
// its last try, and one that does not follow the slot tries last at the
// move or before it. A woken one is granted in milliseconds, which the
// test logs, and must be within 2 s, whatever the machine's load.
func TestClusterWaiterFollowsTheSlot(t *testing.T) {
	t.Parallel() // its time is waits, not work: it runs beside the other waiting tests
	c := redistest.StartCluster(t)
	slow := redislease.Config{TTL: 10 * time.Second, RenewPeriod: time.Second, RetryPeriod: 10 * time.Second}
	moves := []struct {
		name string
		move func(t *testing.T, key string)
	}{
		{"migration", func(t *testing.T, key string) { migrateSlot(t, c, key, 0) }},
		{"failover", func(t *testing.T, key string) { failOverSlot(t, c, key) }},
	}
	for _, m := range moves {
		t.Run(m.name, func(t *testing.T) {
			var waits []time.Duration
			var lost int
			for range *clusterTrials {
				key := keyName(t)
				a := mustLock(t, slow, c.Client(t), key)
				b := lockAsync(t.Context(), slow, c.Client(t), key)
				time.Sleep(100 * time.Millisecond) // B waits
				m.move(t, key)
				time.Sleep(3 * slow.RenewPeriod) // A renews on the new primary, which B hears of
				if err := a.Signal().Err(); err != nil {
					// A failover pauses the primary's writes until the
					// replica caught up, which on a loaded machine may
					// last past A's deadline: a false loss, never a late
					// one. B then takes the key when it expires.
					if !errors.Is(err, redislease.ErrRenewalUnconfirmed) {
						t.Fatalf("A lost across the %s: %v", m.name, err)
					}
					lost++
					a.Unlock(context.Background())
					if g := <-b; g.err == nil {
						g.l.Unlock(context.Background())
					}
					continue
				}
				start := time.Now()
				if err := a.Unlock(context.Background()); err != nil {
					t.Fatalf("A's Unlock after the %s: %v", m.name, err)
				}
				select {
				case g := <-b:
					if g.err != nil {
						t.Fatal(g.err)
					}
					took := g.at.Sub(start)
					waits = append(waits, took)
					if took >= 2*time.Second {
						t.Errorf("B granted %v after A's Unlock after the %s: it was not woken by the release", took, m.name)
					}
					g.l.Unlock(context.Background())
				case <-time.After(10 * time.Second):
					t.Fatalf("B not granted within 10 s of A's Unlock after the %s", m.name)
				}
			}
			if len(waits) > 0 {
				slices.Sort(waits)
				t.Logf("A's Unlock → B granted: median %v, max %v over %d hand-overs after the %s", waits[len(waits)/2], waits[len(waits)-1], len(waits), m.name)
			}
			t.Logf("%d trials: A lost at its deadline across the %s in %d", *clusterTrials, m.name, lost)
			if *clusterTrials >= 3 && lost > *clusterTrials/2 {
				t.Errorf("A lost across %d of %d %ss", lost, *clusterTrials, m.name)
			}

			// A holder whose key moved is told of an operator's DEL on
			// the new primary as of any deletion.
			key := keyName(t)
			cl := c.Client(t)
			a := mustLock(t, short, cl, key)
			m.move(t, key)
			time.Sleep(short.TTL) // a renewal on the new primary
			if err := cl.Del(t.Context(), key).Err(); err != nil {
				t.Fatal(err)
			}
			switch err := waitLost(t, a, lossWithin); {
			case errors.Is(err, redislease.ErrRenewalUnconfirmed):
				t.Logf("A lost at its deadline across the %s, before the DEL: %v", m.name, err)
			case !errors.Is(err, redislease.ErrDeleted):
				t.Errorf("Err() after a DEL on the slot's new primary = %v, want ErrDeleted", err)
			}
		})
	}
}

// TestClusterSlowMigration: while a slot migrates, its keys already on the
// target, the source answers ASK for them; the holder renews its key where
// ASK sends it, and is not lost however long the slot takes to be
// reassigned; also after the caller closed its client.
func TestClusterSlowMigration(t *testing.T) {
	c := redistest.StartCluster(t)
	for i := range 2 * *clusterTrials {
		key := keyName(t)
		rdb := c.Client(t)
		a := mustLock(t, short, rdb, key)
		if i%2 == 1 {
			// The lease goes on without the caller's client, and follows
			// the Cluster's redirections itself.
			rdb.Close()
		}
		migrateSlot(t, c, key, short.TTL) // longer than the deadline leaves after a renewal
		notLost(t, a, short.TTL)
		if err := a.Unlock(context.Background()); err != nil {
			t.Fatalf("Unlock after the migration = %v", err)
		}
		if n, _ := c.Client(t).Exists(t.Context(), key).Result(); n != 0 {
			t.Error("Unlock left the key")
		}
	}
}

// migrateSlot moves key's slot, and its keys, from its primary to another,
// with pause between the move of the keys and the reassignment of the slot.
func migrateSlot(t *testing.T, c *redistest.Cluster, key string, pause time.Duration) {
	ctx := t.Context()
	from, err := redistest.MasterOf(ctx, c.Nodes[0].Addr(), key)
	if err != nil {
		t.Fatal(err)
	}
	var to string
	for _, n := range c.Nodes[:3] {
		if a, err := redistest.MasterOf(ctx, n.Addr(), key); err == nil && n.Addr() != a && isPrimary(t, n.Addr()) {
			to = n.Addr()
			break
		}
	}
	if to == "" {
		t.Fatal("no other primary to migrate to")
	}
	src, dst := client(t, from), client(t, to)
	slot, _ := src.ClusterKeySlot(ctx, key).Result()
	srcID, _ := src.ClusterMyID(ctx).Result()
	dstID, _ := dst.ClusterMyID(ctx).Result()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 1000).Result()
	must(err)
	host, port, _ := strings.Cut(to, ":")
	if len(keys) > 0 {
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	time.Sleep(pause)
	for _, n := range c.Nodes[:3] {
		if isPrimary(t, n.Addr()) {
			must(client(t, n.Addr()).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
		}
	}
}

// failOverSlot makes the replica of key's primary take its place.
func failOverSlot(t *testing.T, c *redistest.Cluster, key string) {
	ctx := t.Context()
	from, err := redistest.MasterOf(ctx, c.Nodes[0].Addr(), key)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := client(t, from).ClusterMyID(ctx).Result()
	for _, n := range c.Nodes {
		info, err := client(t, n.Addr()).Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:slave") {
			continue
		}
		nodes, _ := client(t, n.Addr()).ClusterNodes(ctx).Result()
		for line := range strings.Lines(nodes) {
			if f := strings.Fields(line); len(f) > 3 && strings.Contains(f[2], "myself") && f[3] == id {
				if err := client(t, n.Addr()).ClusterFailover(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					if isPrimary(t, n.Addr()) {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("the replica %s did not take over within 10 s", n.Addr())
					}
				}
			}
		}
	}
	t.Fatalf("no replica of %s", from)
}

func isPrimary(t *testing.T, addr string) bool {
	role, err := client(t, addr).Do(t.Context(), "ROLE").Slice()
	return err == nil && len(role) > 0 && role[0] == "master"
}
