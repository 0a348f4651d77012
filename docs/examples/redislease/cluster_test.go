package redislease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/zukhruf/lease/docs/examples/redislease"
	"github.com/zukhruf/lease/docs/examples/redislease/internal/redistest"
)

// TestCluster: on a Cluster, a key with a hash tag and one without are
// locked, handed over and deleted as on one server; the token counter
// shares the key's slot, so the grant script may write both.
func TestCluster(t *testing.T) {
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
			if err := waitLost(t, g.l, time.Second); !errors.Is(err, redislease.ErrDeleted) {
				t.Fatalf("Err() = %v, want ErrDeleted", err)
			}
			g.l.Unlock(context.Background())
		})
	}
}

// TestClusterSlotFailover kills the primary of the key's slot: its replica
// takes over once the Cluster's node timeout passed; A must be lost before
// B is granted on the new primary, with a larger token.
func TestClusterSlotFailover(t *testing.T) {
	trials := min(*faultTrials, 3)
	for i := range trials {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			c := redistest.StartCluster(t)
			key := keyName(t)
			a := mustLock(t, faultCfg, c.Client(t), key)
			stamp := startStamp(a)
			bctx, cancel := context.WithTimeout(t.Context(), grantBound)
			defer cancel()
			b := lockAsync(bctx, faultCfg, c.Client(t), key)
			time.Sleep(200 * time.Millisecond)
			atRandomPhase()
			master, err := redistest.MasterOf(t.Context(), c.Nodes[0].Addr(), key)
			if err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			c.Node(master).Kill()
			g := <-b
			if g.err != nil {
				t.Fatalf("B's Lock: %v", g.err)
			}
			defer g.l.Unlock(context.Background())
			lostAt, lost := stamp()
			if !lost {
				t.Fatal("B was granted and A was never lost")
			}
			overlap := lostAt.Sub(g.at)
			t.Logf("slot primary %s killed: A lost %v after (%v), B granted %v after; overlap %v; tokens %d then %d",
				master, lostAt.Sub(killed).Round(time.Millisecond), a.Signal().Err(), g.at.Sub(killed).Round(time.Millisecond), overlap.Round(time.Millisecond), a.Token(), g.l.Token())
			if overlap > 0 {
				t.Errorf("A was lost %v after B's grant", overlap)
			}
			if g.l.Token() <= a.Token() {
				t.Errorf("B's token %d, not above A's %d", g.l.Token(), a.Token())
			}
		})
	}
}

// startStamp records when l is lost; the func returned says when, and
// whether it was by then.
func startStamp(l *redislease.Lease) func() (time.Time, bool) {
	at := make(chan time.Time, 1)
	go func() {
		<-l.Signal().Done()
		at <- time.Now()
	}()
	return func() (time.Time, bool) {
		select {
		case t := <-at:
			return t, true
		case <-time.After(time.Second):
			return time.Time{}, false
		}
	}
}
