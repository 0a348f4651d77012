package ctrltest

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

var (
	faultTrials  = flag.Int("faults.trials", 1, "trials of each fault TestFaults runs")
	faultReadme  = flag.String("faults.readme", "", "README whose fault table TestFaults rewrites")
	faultCommand = flag.String("faults.command", "go test -run '^TestFaults$' -faults.trials=N", "the command the table names")
)

// stockLease is the stock Manager's leader election: client-go's 15/10/2
// proportions scaled to the 2 s lease of ctrllease's replicas.
func stockOptions(name string) manager.Options {
	d := leaseConfig.LeaseDuration
	renew, retry := d*10/15, d*2/15
	skip := true // several stock Managers in one process build a "writer" each
	return manager.Options{
		Controller:                    config.Controller{SkipNameValidation: &skip},
		LeaderElection:                true,
		LeaderElectionID:              name,
		LeaderElectionNamespace:       ns,
		LeaderElectionResourceLock:    "leases",
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &d,
		RenewDeadline:                 &renew,
		RetryPeriod:                   &retry,
	}
}

// stock is a stock controller-runtime Manager, LeaderElection true, whose
// leader-only work is the writer of cm.
type stock struct {
	who  string
	stop context.CancelFunc
	done chan struct{}
	err  error
}

func startStock(t testing.TB, b *book, who, name, cm string, cfg *rest.Config) *stock {
	t.Helper()
	m := newManager(t, cfg, stockOptions(name))
	w := &writer{who: who, term: 1, cm: cm, client: m.GetClient(), book: b, stock: true}
	if err := w.register(m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &stock{who: who, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = m.Start(ctx)
	}()
	t.Cleanup(func() {
		s.stop()
		<-s.done
	})
	return s
}

// ctrlFault is one row of the table: a fault applied at once to A, the
// ctrllease leader, and to A′, the stock Manager leading.
type ctrlFault struct {
	faulttrial.Fault
	child bool // A and A′ run in processes of their own
	apply func(tr *ctrlTrial)
}

// ctrlTrial is one run of a fault: A and A′ each through a proxy of its
// own (or in a child process), each with a waiting replica (B, B′)
// connected directly.
type ctrlTrial struct {
	t               *testing.T
	ours, theirs    *book
	name, pname, cm string
	pa, pp          *faultnet.Proxy
	ca, cp          *kubetest.Process
	faultAt         time.Time
}

var ctrlFaults = []ctrlFault{
	{faulttrial.Fault{Name: "silent apiserver link, both ways", Want: faulttrial.NoOverlap}, false, func(tr *ctrlTrial) {
		tr.pa.Drop(faultnet.ToServer | faultnet.ToClient)
		tr.pp.Drop(faultnet.ToServer | faultnet.ToClient)
	}},
	{faulttrial.Fault{Name: "latency 3 s (above the 2 s lease)", Want: faulttrial.NoOverlap}, false, func(tr *ctrlTrial) {
		tr.pa.Delay(3 * time.Second)
		tr.pp.Delay(3 * time.Second)
	}},
	{faulttrial.Fault{Name: "operator overwrites the Lease", Want: faulttrial.NoOverlap}, false, func(tr *ctrlTrial) {
		var wg sync.WaitGroup
		for _, name := range []string{tr.name, tr.pname} {
			wg.Go(func() {
				if err := overwrite(name, "operator"); err != nil {
					tr.t.Error(err)
				}
			})
		}
		wg.Wait()
	}},
	{faulttrial.Fault{Name: "operator deletes the Lease", Want: faulttrial.Raced}, false, func(tr *ctrlTrial) {
		var wg sync.WaitGroup
		for _, name := range []string{tr.name, tr.pname} {
			wg.Go(func() {
				if err := admin.CoordinationV1().Leases(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
					tr.t.Error(err)
				}
			})
		}
		wg.Wait()
	}},
	{faulttrial.Fault{Name: "replica paused (SIGSTOP) 4 s, past its lease", Want: faulttrial.NoOverlap}, true, func(tr *ctrlTrial) {
		tr.ca.Stop()
		tr.cp.Stop()
		time.AfterFunc(4*time.Second, func() {
			tr.ca.Continue()
			tr.cp.Continue()
		})
	}},
}

// run runs one trial of f.
func (f ctrlFault) run(t *testing.T) faulttrial.Trial {
	tr := &ctrlTrial{t: t, ours: &book{}, theirs: &book{}, name: uniqueName(t), pname: uniqueName(t), cm: uniqueName(t)}
	makeConfigMap(t, tr.cm)
	var err error
	if tr.pa, err = faultnet.Listen(shared.Addr()); err != nil {
		t.Fatal(err)
	}
	defer tr.pa.Close()
	if tr.pp, err = faultnet.Listen(shared.Addr()); err != nil {
		t.Fatal(err)
	}
	defer tr.pp.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if f.child {
		tr.ca = kubetest.StartChild(t, shared.Config(), "replica", tr.name, tr.cm, "a")
		tr.cp = kubetest.StartChild(t, shared.Config(), "stock", tr.pname, tr.cm, "a′")
		wg.Go(func() { follow(ctx, tr.ca, tr.ours, "a") })
		wg.Go(func() { follow(ctx, tr.cp, tr.theirs, "a′") })
		defer tr.ca.Send("stop")
		defer tr.cp.Send("stop")
	} else {
		startReplica(t, tr.ours, "a", tr.name, tr.cm, replicaOptions{cfg: shared.ConfigVia(tr.pa.Addr())})
		startStock(t, tr.theirs, "a′", tr.pname, tr.cm, shared.ConfigVia(tr.pp.Addr()))
	}
	waitFor(t, 60*time.Second, "a leads", func() bool { return len(tr.ours.spansOf("a")) > 0 })
	waitFor(t, 60*time.Second, "a′ leads", func() bool { return len(tr.theirs.spansOf("a′")) > 0 })
	startReplica(t, tr.ours, "b", tr.name, tr.cm, replicaOptions{})
	startStock(t, tr.theirs, "b′", tr.pname, tr.cm, shared.Config())
	time.Sleep(500 * time.Millisecond) // both candidates waiting, their caches synced

	tr.faultAt = time.Now()
	f.apply(tr)
	// The next term is B's, or A's own again when A takes the Lease first
	// (after a deletion both campaign at once). A stock A′ may never lose
	// (client-go makes a deleted Lease again and goes on leading): B′ is
	// waited for a while only.
	waitFor(t, 60*time.Second, "a next term", func() bool { return tr.nextSetup() != (time.Time{}) })
	for start := time.Now(); len(tr.theirs.spansOf("b′")) == 0 && time.Since(start) < 10*time.Second; {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(4 * time.Second) // a late write of A′, if any, comes within its renew deadline
	tr.pa.Heal()
	tr.pp.Heal()
	return tr.outcome()
}

// outcome reads the books. A is lost when its term's work returned, B
// granted at its first setup; the overlap is A's last write sent minus B's
// setup: a write of the old term after the new one began is what the
// lease exists to stop. A′ is lost when its work returned, B′ granted when
// its work began, the overlap A′'s last write minus that.
func (tr *ctrlTrial) outcome() faulttrial.Trial {
	var out faulttrial.Trial
	if s := tr.ours.spansOf("a"); len(s) > 0 && !s[0].end.IsZero() {
		out.Lost = true
		out.Detection = s[0].end.Sub(tr.faultAt)
		if s[0].cause != nil {
			out.Cause = s[0].cause.Error()
		}
		if next := tr.nextSetup(); !next.IsZero() {
			out.Granted = true
			out.Overlap = s[0].lastWrite.Sub(next)
		}
	}
	if late := tr.ours.lateStarts(); late > 0 {
		tr.t.Errorf("%d Reconciles of A's term entered after it ended", late)
	}
	p := &faulttrial.Peer{}
	if s := tr.theirs.spansOf("a′"); len(s) > 0 && !s[0].end.IsZero() {
		p.Lost = true
		p.Detection = s[0].end.Sub(tr.faultAt)
		if bs := tr.theirs.spansOf("b′"); len(bs) > 0 {
			p.Granted = true
			p.Overlap = s[0].lastWrite.Sub(bs[0].start)
		}
	} else if len(tr.theirs.spansOf("b′")) > 0 {
		p.Unrecorded = "a′'s work still ran at the end of the trial, B′'s too"
	}
	out.Peer = p
	return out
}

// nextSetup returns the time of the first setup of a term after A's first:
// B's, or A's second.
func (tr *ctrlTrial) nextSetup() time.Time {
	var next time.Time
	if su := tr.ours.setupsOf("b"); len(su) > 0 {
		next = su[0]
	}
	if su := tr.ours.setupsOf("a"); len(su) > 1 && (next.IsZero() || su[1].Before(next)) {
		next = su[1]
	}
	return next
}

// TestFaults runs each fault on a ctrllease leader and a stock
// controller-runtime leader side by side, and checks that the ctrllease
// term's work returned before the other replica's setup began.
func TestFaults(t *testing.T) {
	book := &faulttrial.Book{Peer: "a stock controller-runtime Manager (LeaderElection true, LeaseDuration 2 s, RenewDeadline 1.33 s, RetryPeriod 0.27 s: client-go's 15/10/2 proportions); A's loss is the return of its term's reconcile, B's grant its first Setup; A′'s loss the return of its reconcile, B′'s grant the start of B′'s first reconcile"}
	for _, f := range ctrlFaults {
		t.Run(f.Name, func(t *testing.T) {
			for range *faultTrials {
				book.Add(f.Fault, f.run(t))
			}
		})
	}
	book.Check(t)
	table := book.Table(*faultCommand)
	t.Logf("\n%s", table)
	if *faultReadme != "" {
		if err := faulttrial.WriteTable(*faultReadme, table); err != nil {
			t.Fatal(err)
		}
	}
}

// childStock is a stock Manager in a process of its own: arguments Lease
// name, ConfigMap name, identity; events as childReplica's.
func childStock(c *kubetest.Child) error {
	if len(c.Args) != 3 {
		return fmt.Errorf("want Lease, ConfigMap and identity, got %q", c.Args)
	}
	name, cm, who := c.Args[0], c.Args[1], c.Args[2]
	o := stockOptions(name)
	o.Metrics.BindAddress = "0"
	m, err := manager.New(c.Config, o)
	if err != nil {
		return err
	}
	e := &emitter{c: c}
	w := &writer{who: who, term: 1, cm: cm, client: m.GetClient(), book: &book{}, emit: e.emit, stock: true}
	if err := w.register(m); err != nil {
		return err
	}
	return m.Start(untilStop(c))
}
