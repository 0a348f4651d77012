package redistest_test

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
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
	// WAIT returns once the replicas acknowledge; its timeout, a minute,
	// only bounds a hang.
	if n, err := c.Wait(ctx, 2, time.Minute).Result(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 = %d, %v; want 2", n, err)
	}
	g.Links[0].Drop(faultnet.Both)
	c.Set(ctx, "k", "w", 0)
	if n, err := c.Wait(ctx, 1, time.Minute).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 with a link cut = %d, %v; want at least 1", n, err)
	}
	// The other replica has acknowledged the write; the cut one cannot,
	// however long WAIT waits.
	if n, _ := c.Wait(ctx, 2, 300*time.Millisecond).Result(); n != 1 {
		t.Fatalf("WAIT 2 with a link cut = %d, want 1", n)
	}
	g.Links[0].Heal()
	// The Sentinels, which found the replicas through the primary, left
	// them on their links.
	for i, r := range g.Replicas {
		info, err := r.Client(t).Info(ctx, "replication").Result()
		_, port, _ := strings.Cut(g.Links[i].Addr(), ":")
		if err != nil || !strings.Contains(info, "master_port:"+port+"\r\n") {
			t.Fatalf("replica %d replicates from another port than its link's, %s: %v\n%s", i, port, err, info)
		}
	}
	old := g.Primary.Addr()
	g.Primary.Kill()
	wctx, cancel := context.WithTimeout(ctx, redistest.FailoverWithin)
	defer cancel()
	addr, err := g.WaitFailover(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if g.Server(addr) == nil {
		t.Fatalf("the new primary %s is none of the group's replicas", addr)
	}
}

var stallTrials = flag.Int("redistest.stalls", 1, "trials of TestGroupFailsOverAfterAStall")

// TestGroupFailsOverAfterAStall: the primary is killed while the
// Sentinels are stopped, as a loaded machine stalls every process at once,
// for longer than Sentinel's TILT trigger (2 s) and than DownAfter; resumed
// together, they fail it over within FailoverWithin. With Sentinel's
// default TILT period, 30 s, they acted only after it, passed over the
// replicas whose links had been down for longer than they promote, and
// would not try again for 6 minutes; three Sentinels that find the primary
// down at once may also split their votes, with the same delay after.
// -redistest.stalls sets the trials.
func TestGroupFailsOverAfterAStall(t *testing.T) {
	const stall = 2 * redistest.DownAfter
	for i := range *stallTrials {
		g := redistest.StartGroup(t, 2)
		old := g.Primary.Addr()
		g.Primary.Kill()
		killed := time.Now()
		for _, s := range g.Sentinels {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(stall)
		for _, s := range g.Sentinels {
			if err := s.Resume(); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), redistest.FailoverWithin)
		_, err := g.WaitFailover(ctx, old)
		cancel()
		if err != nil {
			t.Fatalf("trial %d: %v", i, err)
		}
		t.Logf("trial %d: failed over %v after the kill, %v after the stall", i,
			time.Since(killed).Round(time.Millisecond), (time.Since(killed) - stall).Round(time.Millisecond))
		g.Close()
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
