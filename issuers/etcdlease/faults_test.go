package etcdlease_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
)

var (
	faultTrials  = flag.Int("faults.trials", 3, "trials of each fault of TestFaults")
	faultReadme  = flag.String("faults.readme", "", "the README whose faults table TestFaults writes, if any")
	faultCommand = flag.String("faults.command", "make e2e", "the command named under the faults table")
	// The benign latency is a round trip of TTL/4 by default: etcd's own
	// Session, which the lease follows, gives up under a round trip of
	// TTL/2 at a TTL of 2 s (see the README).
	benignLatency = flag.Duration("faults.benign-latency", faultTTL*time.Second/8, "the latency, each way, of the benign latency fault")
)

const (
	// faultTTL is the TTL, in seconds, of the sessions of the fault trials.
	faultTTL = 2
	// grantBound bounds the wait for B's grant after a fault; no fault
	// here makes etcd grant B later than about 8 s after it.
	grantBound = 20 * time.Second
	// benignWindow is how long a benign fault lasts: two TTLs, in which a
	// lease that could not renew would have been lost.
	benignWindow = 2 * faultTTL * time.Second
	// perHolderAtOnce and clustersAtOnce bound the trials that run at once:
	// per-holder faults on one shared cluster, and cluster faults each on a
	// cluster of its own.
	perHolderAtOnce = 8
	clustersAtOnce  = 3
	// peerGrace is how long A′ is still watched after B′'s grant: etcd's
	// Session ends at most a TTL after the last answer it received, checked
	// once a second, so one that has not ended two TTLs after B′'s grant
	// was told nothing; the trial records it as not lost.
	peerGrace = 2 * faultTTL * time.Second
	// peerCycle is the time between two renewals of A′'s session: etcd's
	// client sends one a third of the TTL after each answer, on its next
	// tick of 500 ms, which at a TTL of 2 s is a second after the last send.
	peerCycle = time.Second
)

// peerName says what A′ is, for the line under the table.
const peerName = "etcd's own `concurrency.Mutex` on a `concurrency.Session` of the same TTL, lost when `Session.Done()` closes"

// When a fault starts within the lease's renewal cycle.
type phase int

const (
	afterRenewal  phase = iota // right after etcd confirmed a renewal
	beforeRenewal              // right before the next renewal is sent
	alternate                  // after in odd trials, before in even ones
)

// holderFault is a fault of one holder's network or claim, tried on a
// cluster shared with other trials.
type holderFault struct {
	faulttrial.Fault
	phase phase
	apply func(tr *trial) // starts the fault
}

// trial is one run of a fault: holder A, through its own proxy to member
// a, and holder B, waiting for the same lock on member b; beside them, A′,
// a plain etcd Mutex on a session of A's TTL through the same proxy, and
// B′, waiting for A′'s lock on member b.
type trial struct {
	t       *testing.T
	key     string
	pa      *faultnet.Proxy
	cliA    *clientv3.Client
	sA      *concurrency.Session
	a       *etcdlease.Lease
	op      *clientv3.Client // B's and B′'s client, also used as an operator's
	sB      *concurrency.Session
	bc      chan granted
	stamp   *faulttrial.Stamp
	faultAt time.Time

	cliP        *clientv3.Client // A′'s client, through pa
	sP          *concurrency.Session
	mP          *concurrency.Mutex
	qc          chan peerGranted // B′'s Lock
	stopBPeer   context.CancelFunc
	pStamp      *faulttrial.Stamp
	peerFaultAt time.Time
	pRenewals   *renewals
}

// granted is the result of B's Lock and the time it returned.
type granted struct {
	l   *etcdlease.Lease
	err error
	at  time.Time
}

// peerGranted is the result of B′'s Lock and the time it returned.
type peerGranted struct {
	m   *concurrency.Mutex
	err error
	at  time.Time
}

// renewals keeps the time of the last answer etcd gave to a renewal of a
// session's etcd lease, seen through a second keep-alive channel of the
// same lease, which sends nothing of its own.
type renewals struct {
	mu     sync.Mutex
	last   time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

// watchRenewals starts keeping the answers to s's renewals. The session's
// keep-alive must be running: a keep-alive of a lease the client no longer
// renews would renew it.
func watchRenewals(t *testing.T, s *concurrency.Session) *renewals {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	answers, err := s.Client().KeepAlive(ctx, s.Lease())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &renewals{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for range answers {
			r.mu.Lock()
			r.last = time.Now()
			r.mu.Unlock()
		}
	}()
	return r
}

// at returns the time of the last answer.
func (r *renewals) at() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// stop stops keeping the answers.
func (r *renewals) stop() {
	r.cancel()
	<-r.done
}

func faultClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

func faultSession(t *testing.T, cli *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startTrial makes A hold key through a proxy to member a of c and B wait
// for it on member b, and A′ hold key+"-peer" through the same proxy and B′
// wait for it on member b, and returns once B's and B′'s keys are in etcd.
func startTrial(t *testing.T, c *etcdtest.Cluster, a, b int, key string) *trial {
	t.Helper()
	pa, err := faultnet.Listen(c.Members[a].Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	tr := &trial{t: t, key: key, pa: pa, bc: make(chan granted, 1), qc: make(chan peerGranted, 1)}
	fail := func(err error) {
		t.Helper()
		tr.close()
		t.Fatal(err)
	}
	tr.cliA = faultClient(t, pa.Addr())
	tr.cliP = faultClient(t, pa.Addr())
	tr.op = faultClient(t, c.Members[b].Endpoint())
	tr.sA = faultSession(t, tr.cliA, faultTTL)
	tr.sP = faultSession(t, tr.cliP, faultTTL)
	tr.pRenewals = watchRenewals(t, tr.sP)
	// B's and B′'s sessions outlive the elections a cluster fault causes:
	// their TTL does not change when etcd grants them the lock, A's does.
	tr.sB = faultSession(t, tr.op, 5*faultTTL)
	sQ := faultSession(t, tr.op, 5*faultTTL)
	if tr.a, err = etcdlease.Lock(t.Context(), tr.sA, key); err != nil {
		fail(err)
	}
	tr.mP = concurrency.NewMutex(tr.sP, peerKey(key))
	if err := tr.mP.Lock(t.Context()); err != nil {
		tr.mP = nil
		fail(err)
	}
	go func() {
		l, err := etcdlease.Lock(context.Background(), tr.sB, key)
		tr.bc <- granted{l, err, time.Now()}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	tr.stopBPeer = cancel // B and B′ wait from here on
	go func() {
		m := concurrency.NewMutex(sQ, peerKey(key))
		err := m.Lock(ctx)
		tr.qc <- peerGranted{m, err, time.Now()}
	}()
	// A member that stopped answering fails the trial rather than hang it.
	getCtx, stopGets := context.WithTimeout(t.Context(), grantBound)
	defer stopGets()
	for _, prefix := range []string{key + "/", peerKey(key) + "/"} {
		for {
			resp, err := tr.op.Get(getCtx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				fail(err)
			}
			if resp.Count >= 2 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	tr.stamp = faulttrial.StampWhen(tr.a.Signal().Done())
	tr.pStamp = faulttrial.StampWhen(tr.sP.Done())
	return tr
}

// peerKey is the name of A′'s lock in the trial of key: another prefix, so
// that its keys and A's never count as each other's.
func peerKey(key string) string { return key + "-peer" }

// align waits for the moment p of A's renewal cycle, and of A′'s as near
// as the two cycles allow: etcd has just confirmed a renewal, or the next
// one is about to be sent.
//
// A renews TTL/6 after the send of its last renewal; etcd's client renews
// A′ a third of the TTL after each answer, on a tick of 500 ms, which
// makes a cycle of peerCycle, three of A's. So after an answer to A′, A's
// next answer comes within the first third of A′'s cycle, and exactly one
// of A's next sends falls in its last third: the fault comes right after
// that answer of A's, or right before that send.
func (tr *trial) align(p phase) {
	tr.alignPeer()
	answeredP := tr.pRenewals.at()
	for {
		prev := etcdlease.RenewedAt(tr.a)
		for etcdlease.RenewedAt(tr.a).Equal(prev) && tr.a.Signal().Err() == nil {
			time.Sleep(time.Millisecond)
		}
		if p == afterRenewal || tr.a.Signal().Err() != nil {
			return
		}
		next := etcdlease.RenewedAt(tr.a).Add(faultTTL * time.Second / 6)
		if next.Sub(answeredP) >= peerCycle*2/3 {
			time.Sleep(time.Until(next.Add(-15 * time.Millisecond)))
			return
		}
	}
}

// alignPeer waits for etcd's next answer to a renewal of A′'s session, or
// for the session's end.
func (tr *trial) alignPeer() {
	prev := tr.pRenewals.at()
	for tr.pRenewals.at().Equal(prev) {
		select {
		case <-tr.sP.Done():
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// fault records the time and starts the fault, for A and A′ at once; an
// apply that reaches A′ after A sets tr.peerFaultAt itself.
func (tr *trial) fault(apply func(*trial)) {
	tr.faultAt = time.Now()
	tr.peerFaultAt = tr.faultAt
	apply(tr)
}

// outcome waits as want requires and returns what the trial showed, A′'s
// figures with A's. A grant of B or B′ after the wait does not count.
//
// A benign fault's trial watches the whole window. Any other waits for B's
// grant, and for A's loss even after B's grant: a loss after the grant is
// an overlap to measure, not a loss that never came; so for B′ and A′, but
// A′ is watched for at most peerGrace after B′'s grant. With
// stopWaitingAtLoss, no grant is waited for.
func (tr *trial) outcome(want faulttrial.Want, stopWaitingAtLoss bool) faulttrial.Trial {
	var (
		g                granted
		q                peerGranted
		got, gotQ        bool
		aLost, pLost     = tr.a.Signal().Done(), tr.sP.Done()
		bc, qc           = tr.bc, tr.qc
		grace            <-chan time.Time
		aSeen, pSeen     bool
		graceOver, ended bool
	)
	window := grantBound
	if want == faulttrial.NoLoss {
		window = benignWindow
	}
	timer := time.NewTimer(window)
	defer timer.Stop()
	for !ended {
		if want != faulttrial.NoLoss &&
			aSeen && (got || stopWaitingAtLoss) &&
			(pSeen || graceOver) && (gotQ || stopWaitingAtLoss) {
			break
		}
		select {
		case g = <-bc:
			got, bc = true, nil
		case q = <-qc:
			gotQ, qc = true, nil
			if !pSeen {
				graceTimer := time.NewTimer(peerGrace)
				defer graceTimer.Stop()
				grace = graceTimer.C
			}
		case <-aLost:
			aSeen, aLost = true, nil
		case <-pLost:
			pSeen, pLost = true, nil
		case <-grace:
			graceOver, grace = true, nil
		case <-timer.C:
			ended = true
		}
	}
	var res faulttrial.Trial
	if got {
		if g.err != nil {
			tr.t.Errorf("B's Lock: %v", g.err)
		} else {
			res.Granted = true
		}
		tr.bc <- g // for close to release, or to see it returned
	}
	at, ok := tr.stamp.Stop()
	if ok {
		res.Lost = true
		res.Detection = at.Sub(tr.faultAt)
		res.Cause = tr.a.Signal().Err().Error()
		if res.Granted {
			res.Overlap = at.Sub(g.at)
		}
	}
	res.Peer = &faulttrial.Peer{}
	if gotQ {
		if q.err != nil {
			res.Peer.Unrecorded = fmt.Sprintf("B′'s Lock: %v", q.err)
		} else {
			res.Peer.Granted = true
		}
		tr.qc <- q // for close to release, or to see it returned
	}
	if at, ok := tr.pStamp.Stop(); ok {
		res.Peer.Lost = true
		res.Peer.Detection = at.Sub(tr.peerFaultAt)
		if res.Peer.Granted {
			res.Peer.Overlap = at.Sub(q.at)
		}
	}
	return res
}

// release calls unlock, an Unlock, bounded: a release that cannot reach
// etcd leaves the key to its session's end.
func release(unlock func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	unlock(ctx)
}

// close heals A's proxy, releases the holders and closes the clients; it
// closes what startTrial made before it failed.
func (tr *trial) close() {
	tr.pa.Heal()
	tr.pa.Cut()
	for _, s := range []*faulttrial.Stamp{tr.stamp, tr.pStamp} {
		if s != nil {
			s.Stop()
		}
	}
	if tr.a != nil {
		release(tr.a.Unlock)
	}
	if tr.mP != nil {
		release(tr.mP.Unlock)
	}
	if tr.pRenewals != nil {
		tr.pRenewals.stop()
	}
	// B's Lock returns once A's key is gone, B′'s once A′'s is; B's
	// returns with an error once its renewals fail or its client closes,
	// B′'s once its context is cancelled and its waiting key deleted:
	// etcd's mutex deletes it with its client's context, so with the
	// cluster gone only the client's close ends it
	// (TestMistakeClusterGoneWhileWaiting).
	for _, c := range []*clientv3.Client{tr.cliA, tr.cliP} {
		if c != nil {
			c.Close()
		}
	}
	if tr.stopBPeer != nil {
		select {
		case g := <-tr.bc:
			if g.err == nil {
				release(g.l.Unlock)
			}
		case <-time.After(grantBound):
			tr.op.Close()
			<-tr.bc
		}
		select {
		case q := <-tr.qc:
			if q.err == nil {
				release(q.m.Unlock)
			}
		case <-time.After(grantBound):
			tr.stopBPeer()
			tr.op.Close()
			<-tr.qc
		}
		tr.stopBPeer()
	}
	if tr.op != nil {
		tr.op.Close()
	}
	tr.pa.Close()
}

// holderFaults are the faults of one holder's network or claim.
func holderFaults() []holderFault {
	drop := func(d faultnet.Direction) func(*trial) {
		return func(tr *trial) { tr.pa.Drop(d) }
	}
	delay := func(d time.Duration) func(*trial) {
		return func(tr *trial) { tr.pa.Delay(d) }
	}
	var fs []holderFault
	for _, p := range []struct {
		name string
		p    phase
	}{{"right after a renewal", afterRenewal}, {"right before the next renewal", beforeRenewal}} {
		fs = append(fs,
			holderFault{faulttrial.Fault{Name: "A's network silent both ways, " + p.name, Want: faulttrial.NoOverlap}, p.p, drop(faultnet.Both)},
			holderFault{faulttrial.Fault{Name: "A's requests dropped, " + p.name, Want: faulttrial.NoOverlap}, p.p, drop(faultnet.ToServer)},
			holderFault{faulttrial.Fault{Name: "etcd's replies to A dropped, " + p.name, Want: faulttrial.LossNeeded}, p.p, drop(faultnet.ToClient)},
			holderFault{faulttrial.Fault{Name: "latency 3 s each way (above the TTL), " + p.name, Want: faulttrial.NoOverlap}, p.p, delay(3 * time.Second)},
		)
	}
	fs = append(fs,
		holderFault{faulttrial.Fault{Name: "connection blip (every connection of A's cut once)", Want: faulttrial.NoLoss}, alternate,
			func(tr *trial) { tr.pa.Cut() }},
		holderFault{faulttrial.Fault{Name: fmt.Sprintf("latency %v each way (round trip %v), for two TTLs", *benignLatency, 2**benignLatency),
			Want: faulttrial.NoLoss}, alternate, delay(*benignLatency)},
		// A′'s session is revoked right after A's, each with its own
		// fault time; the two keys are deleted in one transaction.
		holderFault{faulttrial.Fault{Name: "A's session revoked", Want: faulttrial.Raced}, alternate,
			func(tr *trial) {
				if _, err := tr.op.Revoke(context.Background(), tr.sA.Lease()); err != nil {
					tr.t.Error(err)
				}
				tr.peerFaultAt = time.Now()
				if _, err := tr.op.Revoke(context.Background(), tr.sP.Lease()); err != nil {
					tr.t.Error(err)
				}
			}},
		holderFault{faulttrial.Fault{Name: "A's key deleted", Want: faulttrial.Raced}, alternate,
			func(tr *trial) {
				if _, err := tr.op.Txn(context.Background()).
					Then(clientv3.OpDelete(tr.a.Key()), clientv3.OpDelete(tr.mP.Key())).
					Commit(); err != nil {
					tr.t.Error(err)
				}
			}},
	)
	return fs
}

func (p phase) of(trial int) phase {
	if p != alternate {
		return p
	}
	return phase(trial % 2)
}

// clusterFault is a fault of the cluster, tried on a cluster of its own.
type clusterFault struct {
	faulttrial.Fault
	// pick chooses the members of A and B, given the leader's.
	pick func(lead int) (a, b int)
	// apply starts the fault; it reports whether B may not be granted
	// at all, so that the wait ends at A's loss.
	apply func(c *etcdtest.Cluster, tr *trial, a int) (noGrant bool)
}

func clusterFaults() []clusterFault {
	leaderA := func(lead int) (int, int) { return lead, (lead + 1) % 3 }
	followerA := func(lead int) (int, int) { return (lead + 1) % 3, (lead + 2) % 3 }
	return []clusterFault{
		{faulttrial.Fault{Name: "A's member isolated from the others, A's member the leader", Want: faulttrial.NoOverlap}, leaderA,
			func(c *etcdtest.Cluster, tr *trial, a int) bool { c.Isolate(a); return false }},
		{faulttrial.Fault{Name: "A's member isolated from the others, A's member a follower", Want: faulttrial.NoOverlap}, followerA,
			func(c *etcdtest.Cluster, tr *trial, a int) bool { c.Isolate(a); return false }},
		{faulttrial.Fault{Name: "the leader crashed, A's member", Want: faulttrial.NoOverlap}, leaderA,
			func(c *etcdtest.Cluster, tr *trial, a int) bool {
				c.Crash(a)
				tr.pa.Close() // the crashed member's port refuses A's client
				return false
			}},
		{faulttrial.Fault{Name: "the whole cluster stopped", Want: faulttrial.NoOverlap}, leaderA,
			func(c *etcdtest.Cluster, tr *trial, a int) bool {
				go c.Close()
				return true
			}},
	}
}

// TestFaults runs each fault *faultTrials times and checks every trial: A
// is lost no later than B is granted whenever A hears nothing, and a benign
// fault loses nothing. Beside A, each trial records A′, etcd's own Mutex
// on a Session, through the same fault, with its own waiting B′: its
// figures are measured, not checked, but a trial without them fails. With
// -faults.readme, it writes the table of the trials into that README.
func TestFaults(t *testing.T) {
	book := faulttrial.Book{Peer: peerName}
	t.Run("holder", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t)
		// A's member is the leader, B's a follower: etcd publishes a
		// deletion on the leader first, and on a follower once it learns
		// that the leader committed it.
		lead, err := c.Leader()
		if err != nil {
			t.Fatal(err)
		}
		faults := holderFaults()
		n := *faultTrials
		faulttrial.Concurrently(len(faults)*n, perHolderAtOnce, func(k int) {
			fi, i := k/n, k%n
			f := faults[fi]
			t.Run(fmt.Sprintf("%d/%d", fi, i), func(t *testing.T) {
				tr := startTrial(t, c, lead, (lead+1)%3, fmt.Sprintf("/faults/%d/%d", fi, i))
				defer tr.close()
				tr.align(f.phase.of(i))
				tr.fault(f.apply)
				book.Add(f.Fault, tr.outcome(f.Want, false))
			})
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		faults := clusterFaults()
		n := *faultTrials
		faulttrial.Concurrently(len(faults)*n, clustersAtOnce, func(k int) {
			fi, i := k/n, k%n
			f := faults[fi]
			t.Run(fmt.Sprintf("%d/%d", fi, i), func(t *testing.T) {
				c := startCluster(t)
				lead, err := c.Leader()
				if err != nil {
					t.Fatal(err)
				}
				a, b := f.pick(lead)
				tr := startTrial(t, c, a, b, "/faults/cluster")
				defer tr.close()
				tr.align(phase(i % 2))
				var noGrant bool
				tr.fault(func(tr *trial) { noGrant = f.apply(c, tr, a) })
				book.Add(f.Fault, tr.outcome(f.Want, noGrant))
			})
		})
	})
	t.Run("paused", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t)
		faulttrial.Concurrently(*faultTrials, clustersAtOnce, func(i int) {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				refused := pausedTrial(t, c, fmt.Sprintf("/faults/paused/%d", i))
				paused.Lock()
				paused.trials++
				if refused {
					paused.refused++
				}
				paused.Unlock()
			})
		})
	})
	t.Cleanup(func() {
		book.Check(t)
		table := book.Table(*faultCommand)
		t.Logf("\n%s", table)
		if *faultReadme != "" {
			if err := faulttrial.WriteTable(*faultReadme, table+pausedLine()); err != nil {
				t.Error(err)
			}
		}
	})
}

// startCluster starts a three-member cluster for one test and stops it
// when the test ends.
func startCluster(t *testing.T) *etcdtest.Cluster {
	t.Helper()
	c, err := etcdtest.StartCluster([]string{t.TempDir(), t.TempDir(), t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// paused counts the paused-holder trials of TestFaults and the stale writes
// refused, for the README's table.
var paused struct {
	sync.Mutex
	trials, refused int
}

func pausedLine() string {
	paused.Lock()
	defer paused.Unlock()
	if paused.trials == 0 {
		return ""
	}
	return fmt.Sprintf("\nPaused holder (a holder in a child process stopped with SIGSTOP past the TTL, then continued, "+
		"writes with its fencing revision): %d stale writes refused in %d trials (`TestFaults/paused`).\n",
		paused.refused, paused.trials)
}

// pausedEnv names the environment variable that makes the test binary a
// paused holder: its value is the endpoint and the key, separated by a
// space.
const pausedEnv = "ETCDLEASE_PAUSED_HOLDER"

// pausedHolder is the child process of a paused-holder trial: it locks the
// key, checks its signal, says so, and waits for a line on its standard
// input, where the parent stops it; then it writes guarded by its fencing
// revision, as a holder whose check came before a pause does, and says
// whether etcd took the write.
func pausedHolder(spec string) int {
	endpoint, key, _ := strings.Cut(spec, " ")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(faultTTL))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	l, err := etcdlease.Lock(ctx, s, key)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := l.Signal().Err(); err != nil {
		fmt.Println("error: lost before the pause:", err)
		return 1
	}
	fmt.Println("checked") // the signal says live: the write follows
	bufio.NewReader(os.Stdin).ReadString('\n')
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.Key()), "=", l.Token())).
		Then(clientv3.OpPut(key+"-resource", "A")).
		Commit()
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Printf("write succeeded=%v\n", resp.Succeeded)
	return 0
}

// pausedTrial runs a paused holder A in a child process, stops it after it
// checked its signal, waits for B to be granted the lock, continues A and
// lets it write with its fencing revision; it reports whether etcd refused
// A's write, and checks that B's, fenced the same way, is taken.
func pausedTrial(t *testing.T, c *etcdtest.Cluster, key string) (refused bool) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pausedEnv+"="+c.Members[0].Endpoint()+" "+key)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	line := func() string {
		if !lines.Scan() {
			t.Fatalf("the paused holder said nothing more: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := line(); l != "checked" {
		t.Fatalf("the paused holder said %q, want \"checked\"", l)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	op := faultClient(t, c.Members[1].Endpoint())
	defer op.Close()
	s := faultSession(t, op, 5*faultTTL)
	b, err := etcdlease.Lock(t.Context(), s, key)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(context.Background())

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go")
	l := line()
	if !strings.HasPrefix(l, "write succeeded=") {
		t.Fatalf("the paused holder said %q", l)
	}
	if l != "write succeeded=false" {
		t.Errorf("the paused holder's stale write: %s, want refused", l)
	}
	resp, err := op.Txn(t.Context()).
		If(clientv3.Compare(clientv3.CreateRevision(b.Key()), "=", b.Token())).
		Then(clientv3.OpPut(key+"-resource", "B")).
		Commit()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded {
		t.Error("B's write with its fencing revision was refused")
	}
	return l == "write succeeded=false"
}
