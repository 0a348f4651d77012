package k8slease_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

var (
	faultTrials  = flag.Int("faults.trials", 3, "trials of each fault of TestFaults")
	faultReadme  = flag.String("faults.readme", "", "the README whose faults table TestFaults writes, if any")
	faultCommand = flag.String("faults.command", "make e2e", "the command named under the faults table")
)

const (
	// faultLease is the lease duration of the fault trials.
	faultLease = 2 * time.Second
	// grantBound bounds the wait for B's grant after a fault.
	grantBound = 25 * time.Second
	// benignLease is the lease duration of the benign latency's trials:
	// its round trip is a quarter of the lease, as the 500 ms of a 2 s
	// lease, and the whole second a renewal is counted from leaves it more
	// time beside the round trip (1.6 s, where a 2 s lease left 0.3 s, which
	// a loaded machine took once).
	benignLease = 2 * faultLease
	// holdersAtOnce bounds the trials that share the apiserver at once.
	holdersAtOnce = 6
)

// electorConfig is client-go's recommended proportions, 15 s / 10 s / 2 s,
// scaled to the lease duration d.
func electorConfig(cs kubernetes.Interface, name, identity string, d time.Duration, cb leaderelection.LeaderCallbacks) leaderelection.LeaderElectionConfig {
	return leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   d,
		RenewDeadline:   d * 10 / 15,
		RetryPeriod:     d * 2 / 15,
		ReleaseOnCancel: true,
		Callbacks:       cb,
		Name:            name,
	}
}

// elector is a client-go LeaderElector run in a goroutine: the times it
// started and stopped leading.
type elector struct {
	started chan time.Time // OnStartedLeading, once
	stopped chan time.Time // OnStoppedLeading while leading, before stop
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	led     bool
	ending  bool
}

func runElector(t testing.TB, cs kubernetes.Interface, name, identity string, d time.Duration) *elector {
	e := &elector{started: make(chan time.Time, 1), stopped: make(chan time.Time, 1), done: make(chan struct{})}
	cfg := electorConfig(cs, name, identity, d, leaderelection.LeaderCallbacks{
		OnStartedLeading: func(context.Context) {
			e.mu.Lock()
			e.led = true
			e.mu.Unlock()
			e.started <- time.Now()
		},
		OnStoppedLeading: func() {
			at := time.Now()
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.led && !e.ending { // client-go calls it also for a candidate that never led
				e.stopped <- at
			}
		},
	})
	le, err := leaderelection.NewLeaderElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		le.Run(ctx)
	}()
	return e
}

// stop ends the elector (releasing, if it leads) and waits for it.
func (e *elector) stop() {
	e.mu.Lock()
	e.ending = true
	e.mu.Unlock()
	e.cancel()
	<-e.done
}

// holderFault is a fault of A's network or of its Lease, tried on the
// shared apiserver beside other trials.
type holderFault struct {
	faulttrial.Fault
	apply func(tr *trial) // starts the fault
	lease time.Duration   // the lease duration of A, B, A′ and B′; faultLease if zero
}

// leaseDuration is the lease duration of f's trials.
func (f holderFault) leaseDuration() time.Duration {
	if f.lease == 0 {
		return faultLease
	}
	return f.lease
}

// atOnce is how many trials of f run side by side. A benign fault runs
// fewer: its trials measure false losses, and the load of many trials at
// once on a 2-core machine is not part of the fault.
func (f holderFault) atOnce() int {
	if f.Want == faulttrial.NoLoss {
		return 2
	}
	return holdersAtOnce
}

// trial is one run of a fault: A, and beside it client-go's A′, each
// through the proxy p, each with a waiting candidate (B, B′) connected
// directly.
type trial struct {
	t        *testing.T
	s        *kubetest.Server
	p        *faultnet.Proxy
	name     string // A's and B's Lease
	peerName string // A′'s and B′'s Lease
	op       kubernetes.Interface
	a        *k8slease.Lease
	stamp    *faulttrial.Stamp
	bc       <-chan granted
	cancelB  context.CancelFunc
	aPrime   *elector
	bPrime   *elector
	faultAt  time.Time
	lease    time.Duration // A's, B's, A′'s and B′'s lease duration
}

// startTrial starts A and A′ through a proxy of their own, and B and B′
// waiting, and returns once both A and A′ lead and B and B′ have read the
// records.
func startTrial(t *testing.T, s *kubetest.Server, n int, d time.Duration) *trial {
	t.Helper()
	cfg := k8slease.Config{LeaseDuration: d}
	p, err := faultnet.Listen(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	tr := &trial{t: t, s: s, p: p, name: fmt.Sprintf("%s-%d", leaseName(t), n), lease: d}
	tr.peerName = tr.name + "-peer"
	tr.op = clientset(t, s.Config())
	viaProxy := s.ConfigVia(p.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if tr.a, err = cfg.Lock(ctx, clientset(t, viaProxy), ns, tr.name, "a"); err != nil {
		p.Close()
		t.Fatal(err)
	}
	tr.stamp = faulttrial.StampWhen(tr.a.Signal().Done())
	tr.aPrime = runElector(t, clientset(t, viaProxy), tr.peerName, "a-prime", d)
	select {
	case <-tr.aPrime.started:
	case <-ctx.Done():
		t.Fatal("A′ did not lead within a minute")
	}
	bctx, cancelB := context.WithCancel(context.Background())
	tr.cancelB = cancelB
	tr.bc = lockAsync(bctx, cfg, tr.op, tr.name, "b")
	tr.bPrime = runElector(t, clientset(t, s.Config()), tr.peerName, "b-prime", d)
	time.Sleep(500 * time.Millisecond) // B and B′ read the records
	return tr
}

// atRandomPhase waits a random part of a renewal period, so that faults
// start at every phase of the renewal cycle.
func atRandomPhase() {
	time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
}

// finish waits for the outcome of the fault and heals it; benign faults
// are watched for two lease durations, in which a lease that could not
// renew would have been lost.
func (tr *trial) finish(f faulttrial.Fault) faulttrial.Trial {
	var res faulttrial.Trial
	var b granted
	var gotB bool
	if f.Want == faulttrial.NoLoss {
		select {
		case b = <-tr.bc:
			gotB = true
		case <-time.After(2 * tr.lease):
		}
	} else {
		select {
		case b = <-tr.bc:
			gotB = true
		case <-time.After(grantBound):
		}
	}
	lostAt, lost := tr.stamp.Stop()
	res.Lost = lost
	if gotB && b.err == nil {
		res.Granted = true
		defer b.l.Unlock(context.Background())
	}
	if lost {
		res.Detection = lostAt.Sub(tr.faultAt)
		res.Cause = tr.a.Signal().Err().Error()
		if res.Granted {
			res.Overlap = lostAt.Sub(b.at)
		}
	}
	res.Peer = tr.peer(f)
	tr.p.Heal()
	tr.p.Cut()
	tr.cancelB()
	if !gotB {
		if g := <-tr.bc; g.err == nil {
			g.l.Unlock(context.Background())
		}
	}
	tr.a.Unlock(context.Background())
	tr.aPrime.stop()
	tr.bPrime.stop()
	tr.p.Close()
	return res
}

// peer returns A′'s figures: its OnStoppedLeading against B′'s
// OnStartedLeading, each waited for as long as A's and B's.
func (tr *trial) peer(f faulttrial.Fault) *faulttrial.Peer {
	p := &faulttrial.Peer{}
	bound := grantBound
	if f.Want == faulttrial.NoLoss {
		bound = time.Millisecond // already watched for two lease durations beside A
	}
	timeout := time.After(bound)
	var lostAt, grantAt time.Time
	for !p.Lost || !p.Granted {
		select {
		case at := <-tr.aPrime.stopped:
			p.Lost, lostAt = true, at
		case at := <-tr.bPrime.started:
			p.Granted, grantAt = true, at
		case <-timeout:
			goto done
		}
	}
done:
	if p.Lost {
		p.Detection = lostAt.Sub(tr.faultAt)
		if p.Granted {
			p.Overlap = lostAt.Sub(grantAt)
		}
	}
	return p
}

var holderFaults = []holderFault{
	{Fault: faulttrial.Fault{Name: "A's network silent both ways", Want: faulttrial.NoOverlap}, apply: func(tr *trial) {
		tr.p.Drop(faultnet.Both)
	}},
	{Fault: faulttrial.Fault{Name: "A's requests dropped (silent toward the apiserver)", Want: faulttrial.NoOverlap}, apply: func(tr *trial) {
		tr.p.Drop(faultnet.ToServer)
	}},
	{Fault: faulttrial.Fault{Name: "A's answers dropped (the apiserver still hears A)", Want: faulttrial.LossNeeded}, apply: func(tr *trial) {
		tr.p.Drop(faultnet.ToClient)
	}},
	{Fault: faulttrial.Fault{Name: "latency above the lease duration (2.5 s each way)", Want: faulttrial.NoOverlap}, apply: func(tr *trial) {
		tr.p.Delay(faultLease + faultLease/4)
	}},
	{Fault: faulttrial.Fault{Name: "benign latency (500 ms each way, a round trip of a quarter of a 4 s lease)", Want: faulttrial.NoLoss}, lease: benignLease, apply: func(tr *trial) {
		tr.p.Delay(benignLease / 8)
	}},
	{Fault: faulttrial.Fault{Name: "connection reset", Want: faulttrial.NoLoss}, apply: func(tr *trial) {
		tr.p.Cut()
	}},
	{Fault: faulttrial.Fault{Name: "holder overwritten by an operator", Want: faulttrial.NoOverlap}, apply: func(tr *trial) {
		overwrite := func(l *coordinationv1.Lease) { s := "operator"; l.Spec.HolderIdentity = &s }
		edit(tr.t, tr.op, tr.name, overwrite)
		tr.faultAt = time.Now() // detection counts from the write's answer
		edit(tr.t, tr.op, tr.peerName, overwrite)
	}},
	// The deletion reaches A's watch and B's at once, and B makes the Lease
	// anew as soon as it reads it gone: a race by nature.
	{Fault: faulttrial.Fault{Name: "Lease deleted", Want: faulttrial.Raced}, apply: func(tr *trial) {
		if err := tr.op.CoordinationV1().Leases(ns).Delete(tr.t.Context(), tr.name, metav1.DeleteOptions{}); err != nil {
			tr.t.Fatal(err)
		}
		tr.faultAt = time.Now()
		tr.op.CoordinationV1().Leases(ns).Delete(tr.t.Context(), tr.peerName, metav1.DeleteOptions{})
	}},
}

// serverFaults stop what the apiserver stands on; each trial has the
// apiserver to itself.
var serverFaults = []holderFault{
	// Down for two lease durations: a restart quicker than the time a
	// renewal may take leaves the lease live, rightly, and tells nothing.
	{Fault: faulttrial.Fault{Name: "apiserver stopped for two lease durations, then started", Want: faulttrial.NoOverlap}, apply: func(tr *trial) {
		if err := tr.s.StopAPIServer(); err != nil {
			tr.t.Fatal(err)
		}
		time.Sleep(2 * faultLease)
		if err := tr.s.StartAPIServer(); err != nil {
			tr.t.Fatal(err)
		}
	}},
	{Fault: faulttrial.Fault{Name: "etcd under the apiserver stopped for two lease durations", Want: faulttrial.NoOverlap}, apply: func(tr *trial) {
		if err := tr.s.StopEtcd(); err != nil {
			tr.t.Fatal(err)
		}
		time.Sleep(2 * faultLease)
		if err := tr.s.StartEtcd(); err != nil {
			tr.t.Fatal(err)
		}
	}},
}

// TestFaults puts A, and client-go's LeaderElector A′ beside it, through the
// faults leases exist for; each must show what its row says, and A′'s
// figures are recorded beside A's. -faults.trials sets the trials per fault.
func TestFaults(t *testing.T) {
	book := &faulttrial.Book{Peer: "client-go's LeaderElector (LeaseDuration 2 s, RenewDeadline 1.33 s, RetryPeriod 0.27 s: client-go's 15/10/2 proportions; in the benign latency's trials, a 4 s lease in the same proportions), its loss taken at OnStoppedLeading and B′'s grant at OnStartedLeading"}
	run := func(t *testing.T, s *kubetest.Server, f holderFault, i int) {
		tr := startTrial(t, s, i, f.leaseDuration())
		atRandomPhase()
		tr.faultAt = time.Now()
		f.apply(tr)
		book.Add(f.Fault, tr.finish(f.Fault))
	}
	for _, f := range holderFaults {
		t.Run(f.Name, func(t *testing.T) {
			faulttrial.Concurrently(*faultTrials, f.atOnce(), func(i int) { run(t, shared, f, i) })
		})
	}
	s := kubetest.Start(t)
	for _, f := range serverFaults {
		t.Run(f.Name, func(t *testing.T) {
			for i := range *faultTrials {
				run(t, s, f, i)
			}
		})
	}
	paused := pausedTrials(t, *faultTrials)
	book.Check(t)
	table := book.Table(*faultCommand) + "\n" + paused + "\n"
	t.Logf("\n%s", table)
	if *faultReadme != "" {
		if err := faulttrial.WriteTable(*faultReadme, table); err != nil {
			t.Fatal(err)
		}
	}
}

// pausedTrials runs n paused-holder trials and says how many stale writes
// the token refused.
func pausedTrials(t *testing.T, n int) string {
	f := &fence{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	refused := 0
	for range n {
		w, _ := pausedTrial(t, shared, f, srv.URL)
		if w == "refused" {
			refused++
		} else {
			t.Errorf("a paused holder's stale write: %s, want refused", w)
		}
	}
	return fmt.Sprintf("Paused holder (SIGSTOP between its check and its write, B granted meanwhile): the token refused the stale write in %d of %d trials.", refused, n)
}

// TestMixedFleet silences a k8slease holder while a client-go candidate and
// a k8slease candidate wait: whoever is granted next, the holder was lost
// first. It is the rule of the whole second at work: client-go notices a
// renewal only when the second written in renewTime changes.
func TestMixedFleet(t *testing.T) {
	type outcome struct {
		who     string
		overlap time.Duration
	}
	var mu sync.Mutex
	var outcomes []outcome
	faulttrial.Concurrently(*faultTrials, holdersAtOnce, func(i int) {
		p, err := faultnet.Listen(shared.Addr())
		if err != nil {
			t.Error(err)
			return
		}
		defer p.Close()
		name := fmt.Sprintf("%s-%d", leaseName(t), i)
		a, err := short.Lock(t.Context(), clientset(t, shared.ConfigVia(p.Addr())), ns, name, "a")
		if err != nil {
			t.Error(err)
			return
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			a.Unlock(ctx) // through the silent proxy: the record is not A's any more
		}()
		stamp := faulttrial.StampWhen(a.Signal().Done())
		c := runElector(t, clientset(t, shared.Config()), name, "client-go", faultLease)
		defer c.stop()
		// In even trials client-go's candidate waits alone: a k8slease
		// candidate, woken by its watch at the moment the record expires,
		// would be granted first.
		bc := make(<-chan granted)
		if i%2 == 1 {
			bctx, cancelB := context.WithCancel(context.Background())
			bc = lockAsync(bctx, short, clientset(t, shared.Config()), name, "b")
			defer func() {
				cancelB()
				if g := <-bc; g.err == nil {
					g.l.Unlock(context.Background())
				}
			}()
		}
		time.Sleep(500 * time.Millisecond)
		atRandomPhase()
		p.Drop(faultnet.Both)
		var o outcome
		select {
		case at := <-c.started:
			o.who = "client-go"
			lostAt, ok := stamp.Stop()
			if !ok {
				t.Errorf("trial %d: client-go's candidate was granted and A was never lost", i)
				return
			}
			o.overlap = lostAt.Sub(at)
		case g := <-bc:
			bc = func() <-chan granted { c := make(chan granted, 1); c <- granted{err: context.Canceled}; return c }()
			if g.err != nil {
				t.Errorf("trial %d: B's Lock: %v", i, g.err)
				return
			}
			g.l.Unlock(context.Background())
			o.who = "k8slease"
			lostAt, ok := stamp.Stop()
			if !ok {
				t.Errorf("trial %d: B was granted and A was never lost", i)
				return
			}
			o.overlap = lostAt.Sub(g.at)
		case <-time.After(grantBound):
			t.Errorf("trial %d: nobody was granted within %v", i, grantBound)
			return
		}
		if o.overlap > 0 {
			t.Errorf("trial %d: A was lost %v after %s's candidate was granted", i, o.overlap, o.who)
		}
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	})
	counts := map[string]int{}
	var worst time.Duration = -time.Hour
	for _, o := range outcomes {
		counts[o.who]++
		worst = max(worst, o.overlap)
	}
	t.Logf("mixed fleet: %d trials; granted next: client-go %d, k8slease %d; A lost before the grant in every trial; largest overlap %v",
		len(outcomes), counts["client-go"], counts["k8slease"], worst.Round(time.Millisecond))
}

// TestMutualExclusion: three holders take and release one Lease, a hundred
// rounds in all; no two hold it at once.
func TestMutualExclusion(t *testing.T) {
	const holders, rounds = 3, 100
	name := leaseName(t)
	var mu sync.Mutex
	var held []string // who held it, in order
	inside := 0
	left := rounds
	var wg sync.WaitGroup
	for h := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs := clientset(t, shared.Config())
			id := fmt.Sprintf("holder-%d", h)
			for {
				mu.Lock()
				if left <= 0 {
					mu.Unlock()
					return
				}
				mu.Unlock()
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				l, err := short.Lock(ctx, cs, ns, name, id)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				if inside > 1 {
					t.Errorf("round %d: %s holds the Lease beside another holder", rounds-left+1, id)
				}
				held = append(held, id)
				left--
				mu.Unlock()
				if err := l.Signal().Err(); err != nil {
					t.Errorf("%s lost the lease while holding it: %v", id, err)
				}
				mu.Lock()
				inside--
				mu.Unlock()
				if err := l.Unlock(t.Context()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	by := map[string]int{}
	for _, h := range held {
		by[h]++
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
	}
	t.Logf("%d rounds: %s", len(held), strings.Join(parts, ", "))
}
