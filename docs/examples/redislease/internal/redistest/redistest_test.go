package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/zukhruf/lease/docs/examples/redislease/internal/redistest"
	"github.com/zukhruf/lease/internal/faultnet"
)

// TestServerRestartsEmpty: a server killed and started again answers on the
// same port, without the keys it had.
func TestServerRestartsEmpty(t *testing.T) {
	s := redistest.StartServer(t)
	c := s.Client(t)
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(t.Context(), "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS after the restart = %d, %v; want 0, nil", n, err)
	}
}

// TestGroupReplicatesAndFailsOver: a write reaches both replicas through
// their links; a cut link stops the acknowledgements; a killed primary is
// failed over.
func TestGroupReplicatesAndFailsOver(t *testing.T) {
	g := redistest.StartGroup(t, 2)
	c := g.Primary.Client(t)
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Wait(ctx, 2, time.Second).Result(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 = %d, %v; want 2", n, err)
	}
	// The Sentinels leave the replicas on their links.
	time.Sleep(6 * time.Second)
	g.Links[0].Drop(faultnet.Both)
	c.Set(ctx, "k", "w", 0)
	if n, _ := c.Wait(ctx, 2, 300*time.Millisecond).Result(); n != 1 {
		t.Fatalf("WAIT 2 with a link cut = %d, want 1", n)
	}
	g.Links[0].Heal()
	old := g.Primary.Addr()
	g.Primary.Kill()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	addr, err := g.WaitFailover(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if g.Server(addr) == nil {
		t.Fatalf("the new primary %s is none of the group's replicas", addr)
	}
}

// TestClusterStarts: three primaries with a replica each serve every slot.
func TestClusterStarts(t *testing.T) {
	c := redistest.StartCluster(t)
	cl := c.Client(t)
	for _, k := range []string{"a", "b", "c", "{a}x"} {
		if err := cl.Set(t.Context(), k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	addr, err := redistest.MasterOf(t.Context(), c.Nodes[0].Addr(), "a")
	if err != nil || c.Node(addr) == nil {
		t.Fatalf("MasterOf(a) = %q, %v; want one of the nodes", addr, err)
	}
}
