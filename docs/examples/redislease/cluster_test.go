package redislease_test

import (
	"context"
	"errors"
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
