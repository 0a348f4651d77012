package ctrltest

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/internal/faultnet"
)

var fleetTrials = flag.Int("fleet.trials", 2, "trials of TestMixedFleet, each a hand-over each way")

// TestMixedFleet shares one Lease between stock controller-runtime Managers
// (LeaderElection true, LeaderElectionID the Lease's name, resource lock
// leases) and ctrllease replicas, as in a rolling upgrade: a stock leader
// stops and a ctrllease replica leads, which stops and a stock Manager
// leads; then a ctrllease leader's link goes silent and a stock Manager
// takes the Lease over. No two ever run their leader-only work at once.
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

		// A loss, not a stop: a ctrllease leader whose apiserver link goes
		// silent, a stock Manager waiting; the stock Manager takes the
		// Lease over by client-go's rule, after the ctrllease term's last
		// write.
		p, err := faultnet.Listen(shared.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c2 := startReplica(t, b, "ctrllease-2", name, cm, replicaOptions{cfg: shared.ConfigVia(p.Addr())})
		waitLeading(t, b, c2, 1)
		s3 := startStock(t, b, "stock-3", name, cm, shared.Config())
		time.Sleep(300 * time.Millisecond) // s3 campaigns
		p.Drop(faultnet.ToServer | faultnet.ToClient)
		waitFor(t, 30*time.Second, "the third stock Manager leads", func() bool { return len(b.spansOf("stock-3")) > 0 })
		p.Heal()
		s3.stop()
		<-s3.done
		c2.stop()
		<-c2.done
		p.Close()
		if last, next := b.spansOf("ctrllease-2")[0].lastWrite, b.spansOf("stock-3")[0].start; !last.Before(next) {
			t.Fatalf("trial %d: the silent ctrllease leader wrote %v after the stock Manager's work began", i+1, last.Sub(next))
		}
		if o := b.overlaps(); len(o) > 0 {
			t.Fatalf("trial %d: overlaps: %s", i+1, strings.Join(o, "; "))
		}
		if s1.err != nil || s2.err != nil || c.err != nil {
			t.Fatalf("trial %d: the Managers stopped with %v, %v, %v", i+1, s1.err, s2.err, c.err)
		}
		st, ct := b.spansOf("stock-1")[0], b.spansOf("ctrllease")[0]
		s2t := b.spansOf("stock-2")[0]
		b.mu.Lock()
		n := b.stockLate
		b.mu.Unlock()
		if n > 0 {
			t.Logf("trial %d: %d Reconciles of the stock Managers entered after their context ended", i+1, n)
		}
		t.Logf("trial %d: stock → ctrllease %v, ctrllease → stock %v (work returned → next work began)", i+1,
			ct.start.Sub(st.end).Round(time.Millisecond), s2t.start.Sub(ct.end).Round(time.Millisecond))
	}
}
