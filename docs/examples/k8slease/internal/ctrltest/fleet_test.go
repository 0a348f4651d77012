package ctrltest

import (
	"flag"
	"strings"
	"testing"
	"time"
)

var fleetTrials = flag.Int("fleet.trials", 2, "trials of TestMixedFleet, each a hand-over each way")

// TestMixedFleet shares one Lease between stock controller-runtime Managers
// (LeaderElection true, LeaderElectionID the Lease's name, resource lock
// leases) and ctrllease replicas, as in a rolling upgrade: a stock leader
// stops and a ctrllease replica leads, which stops and a stock Manager
// leads; no two ever run their leader-only work at once.
func TestMixedFleet(t *testing.T) {
	for i := range *fleetTrials {
		b := &book{}
		name, cm := uniqueName(t), uniqueName(t)
		makeConfigMap(t, cm)
		s1 := startStock(t, b, "stock-1", name, cm, shared.Config())
		waitFor(t, 30*time.Second, "the stock Manager leads", func() bool { return len(b.spansOf("stock-1")) > 0 })
		c := startReplica(t, b, "ctrllease", name, cm, replicaOptions{opts: nil})
		time.Sleep(300 * time.Millisecond) // c campaigns
		s1.stop()
		<-s1.done
		waitLeading(t, b, c, 1)
		s2 := startStock(t, b, "stock-2", name, cm, shared.Config())
		time.Sleep(300 * time.Millisecond) // s2 campaigns
		c.stop()
		<-c.done
		waitFor(t, 30*time.Second, "the second stock Manager leads", func() bool { return len(b.spansOf("stock-2")) > 0 })
		s2.stop()
		<-s2.done
		if o := b.overlaps(); len(o) > 0 {
			t.Fatalf("trial %d: overlaps: %s", i+1, strings.Join(o, "; "))
		}
		if s1.err != nil || s2.err != nil || c.err != nil {
			t.Fatalf("trial %d: the Managers stopped with %v, %v, %v", i+1, s1.err, s2.err, c.err)
		}
		st, ct := b.spansOf("stock-1")[0], b.spansOf("ctrllease")[0]
		s2t := b.spansOf("stock-2")[0]
		t.Logf("trial %d: stock → ctrllease %v, ctrllease → stock %v (work returned → next work began)", i+1,
			ct.start.Sub(st.end).Round(time.Millisecond), s2t.start.Sub(ct.end).Round(time.Millisecond))
	}
}
