package natslease_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
)

var (
	faultTrials  = flag.Int("faults.trials", 3, "trials of each fault of TestFaults")
	faultReadme  = flag.String("faults.readme", "", "the README whose faults table TestFaults writes, if any")
	faultCommand = flag.String("faults.command", "make e2e-nats", "the command named under the faults table")
)

const (
	// faultTTL is the TTL of the fault trials, A's and A′'s alike.
	faultTTL = 2 * time.Second
	// grantBound bounds the wait for B's grant after a fault: a server
	// down or paused for two TTLs, then A's key's expiry.
	grantBound = 6 * faultTTL
	// benignWindow is how long a benign fault lasts: two TTLs, in which a
	// lease that could not renew would have been lost.
	benignWindow = 2 * faultTTL
	// holdersAtOnce bounds the trials that share the server at once.
	holdersAtOnce = 6
)

var faultCfg = natslease.Config{TTL: faultTTL}

// peerName says what A′ is, under the table.
const peerName = "the pattern users write by hand on nats.go's jetstream KV (Create with a per-key TTL of 2 s, then Update at the last revision every 667 ms, a third of the TTL, no watcher), " +
	"its loss taken when an Update fails, and B′'s grant when its Create, tried every 20 ms, succeeds; its Update writes no TTL (nats.go#1994, TestUpdateDropsTTL), so after the first one its key never expires"

// peerHolder is A′: a key created and updated by hand in a goroutine.
type peerHolder struct {
	lost   chan time.Time // when an Update failed, once
	cancel context.CancelFunc
	done   chan struct{}
	kv     jetstream.KeyValue
	key    string
}

func holdPeer(ctx context.Context, kv jetstream.KeyValue, key string) (*peerHolder, error) {
	rev, err := kv.Create(ctx, key, []byte("peer"), jetstream.KeyTTL(faultTTL))
	if err != nil {
		return nil, fmt.Errorf("A′'s Create: %w", err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	p := &peerHolder{lost: make(chan time.Time, 1), cancel: cancel, done: make(chan struct{}), kv: kv, key: key}
	go func() {
		defer close(p.done)
		t := time.NewTicker(faultTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			uctx, cancel := context.WithTimeout(pctx, faultTTL/3)
			var err error
			rev, err = kv.Update(uctx, key, []byte("peer"), rev)
			cancel()
			if err != nil {
				if pctx.Err() == nil {
					p.lost <- time.Now()
				}
				return
			}
		}
	}()
	return p, nil
}

func (p *peerHolder) stop() {
	p.cancel()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.kv.Purge(ctx, p.key)
}

// waitPeer is B′: a Create tried every 20 ms until ctx ends; the time it
// succeeded arrives on the channel returned.
func waitPeer(ctx context.Context, kv jetstream.KeyValue, key string) <-chan time.Time {
	c := make(chan time.Time, 1)
	go func() {
		defer close(c)
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := kv.Create(cctx, key, []byte("peer B′"), jetstream.KeyTTL(faultTTL))
			cancel()
			if err == nil {
				c <- time.Now()
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return c
}

// env is the servers a fault's trials run on: the shared server, or a
// server or cluster of the fault's own that its trials take in turn.
type env struct {
	s   *natstest.Server  // the server, for server faults
	c   *natstest.Cluster // the cluster, for leader changes
	url string
}

// setup is where a trial's holders connect: viaA for A and A′ (through the
// fault), direct for B, B′ and the operator.
type setup struct {
	env          *env
	viaA, direct func() *nats.Conn
	p            *faultnet.Proxy // A's proxy, for network faults
	cleanup      []func()
	mu           sync.Mutex
}

func (s *setup) conn(t *testing.T, url string) *nats.Conn {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), quiet)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.cleanup = append(s.cleanup, nc.Close)
	s.mu.Unlock()
	return nc
}

func (s *setup) close() {
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
}

// viaProxy is the setup of a network fault: a proxy of the trial's own in
// front of the shared server.
func viaProxy(t *testing.T, e *env) *setup {
	p, err := faultnet.Listen(shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s := &setup{env: e, p: p}
	s.viaA = func() *nats.Conn { return s.conn(t, "nats://app:app@"+p.Addr()) }
	s.direct = func() *nats.Conn { return s.conn(t, e.url) }
	s.cleanup = append(s.cleanup, func() { p.Close() })
	return s
}

// direct is the setup of a server fault: every holder on the fault's own
// server or cluster.
func direct(t *testing.T, e *env) *setup {
	s := &setup{env: e}
	s.viaA = func() *nats.Conn { return s.conn(t, e.url) }
	s.direct = s.viaA
	return s
}

func sharedEnv(*testing.T) *env { return &env{url: shared.URL(natstest.App)} }

// ownServer is a single server of the fault's own, with the bucket.
func ownServer(t *testing.T) *env {
	s := natstest.StartT(t)
	if err := createBucket(s.URL(natstest.App), natslease.DefaultBucket, 1); err != nil {
		t.Fatal(err)
	}
	return &env{s: s, url: s.URL(natstest.App)}
}

// ownCluster is a cluster of three of the fault's own, with the bucket at
// R3.
func ownCluster(t *testing.T) *env {
	c := natstest.StartClusterT(t)
	if err := createBucket(c.URL(natstest.App), natslease.DefaultBucket, 3); err != nil {
		t.Fatal(err)
	}
	return &env{c: c, url: c.URL(natstest.App)}
}

// trial is one run of a fault: A and the hand-written A′ through the
// fault, each with a waiting holder (B, B′) outside it.
type trial struct {
	t       *testing.T
	s       *setup
	key     string
	peerKey string
	a       *natslease.Lease
	stamp   *faulttrial.Stamp
	bc      <-chan granted
	cancelB context.CancelFunc
	aPrime  *peerHolder
	bPrime  <-chan time.Time
	ops     jetstream.KeyValue // the operator's
	faultAt time.Time
	// bound, if not zero, replaces grantBound: B is never granted.
	bound        time.Duration
	grantedToken int64
}

func startTrial(t *testing.T, s *setup, n int) *trial {
	t.Helper()
	tr := &trial{t: t, s: s, key: fmt.Sprintf("%s-%d", keyName(t), n)}
	tr.peerKey = tr.key + "-peer"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var err error
	if tr.a, err = faultCfg.Lock(ctx, s.viaA(), tr.key); err != nil {
		t.Fatalf("A's Lock: %v", err)
	}
	tr.stamp = faulttrial.StampWhen(tr.a.Signal().Done())
	if tr.aPrime, err = holdPeer(ctx, bucket(t, s.viaA(), natslease.DefaultBucket), tr.peerKey); err != nil {
		t.Fatal(err)
	}
	tr.ops = bucket(t, s.direct(), natslease.DefaultBucket)
	bctx, cancelB := context.WithCancel(context.Background())
	tr.cancelB = cancelB
	tr.bc = lockAsync(bctx, faultCfg, s.direct(), tr.key)
	tr.bPrime = waitPeer(bctx, bucket(t, s.direct(), natslease.DefaultBucket), tr.peerKey)
	time.Sleep(200 * time.Millisecond) // B and B′ wait
	return tr
}

// atRandomPhase waits a random part of a renewal period, so that faults
// start at every phase of the renewal cycle.
func atRandomPhase() {
	time.Sleep(time.Duration(rand.Int64N(int64(faultTTL / 3))))
}

// finish waits for the outcome of the fault and ends the trial.
func (tr *trial) finish(f faulttrial.Fault) faulttrial.Trial {
	var res faulttrial.Trial
	var b granted
	var gotB bool
	bound := grantBound
	switch {
	case f.Want == faulttrial.NoLoss:
		bound = benignWindow
	case tr.bound > 0:
		bound = tr.bound
	}
	start := time.Now()
	timeout := time.After(bound)
	var pLostAt, pGrantAt time.Time
	var pLost, pGranted bool
	for !gotB || !pLost || !pGranted {
		select {
		case b = <-tr.bc:
			gotB = true
			tr.bc = nil
			// A′'s key may never expire (its Update writes no TTL): past
			// B's grant, B′ is given two TTLs more, not the whole bound.
			timeout = time.After(min(2*faultTTL, time.Until(start.Add(bound))))
		case at := <-tr.aPrime.lost:
			pLost, pLostAt = true, at
		case at, ok := <-tr.bPrime:
			if ok {
				pGranted, pGrantAt = true, at
			}
			tr.bPrime = nil
		case <-timeout:
			goto done
		}
	}
done:
	lostAt, lost := tr.stamp.Stop()
	res.Lost = lost
	if gotB && b.err == nil {
		res.Granted = true
		tr.grantedToken = b.l.Token()
		defer b.l.Unlock(context.Background())
	}
	if lost {
		res.Detection = lostAt.Sub(tr.faultAt)
		res.Cause = tr.a.Signal().Err().Error()
		if res.Granted {
			res.Overlap = lostAt.Sub(b.at)
		}
	}
	p := &faulttrial.Peer{Lost: pLost, Granted: pGranted}
	if pLost {
		p.Detection = pLostAt.Sub(tr.faultAt)
		if pGranted {
			p.Overlap = pLostAt.Sub(pGrantAt)
		}
	}
	res.Peer = p
	if tr.s.p != nil {
		tr.s.p.Heal()
		tr.s.p.Cut()
	}
	tr.cancelB()
	if !gotB {
		if g := <-tr.bc; g.err == nil {
			g.l.Unlock(context.Background())
		}
	}
	if tr.bPrime != nil {
		for range tr.bPrime {
		}
	}
	uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	tr.a.Unlock(uctx)
	cancel()
	tr.aPrime.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	tr.ops.Purge(ctx, tr.key)
	cancel()
	return res
}

type fault struct {
	faulttrial.Fault
	env   func(t *testing.T) *env
	setup func(t *testing.T, e *env) *setup
	apply func(tr *trial) // starts the fault; may set faultAt later than its start
}

// atOnce is how many trials of f run side by side: server faults one at a
// time, benign faults two (they count false losses, and the load of many
// trials at once on a 2-core machine is not part of the fault).
func (f fault) atOnce() int {
	switch {
	case f.env != nil:
		return 1
	case f.Want == faulttrial.NoLoss:
		return 2
	}
	return holdersAtOnce
}

// both runs do on A's key and on A′'s, in that order, and takes the
// fault's time after A's.
func both(tr *trial, do func(key string) error) {
	if err := do(tr.key); err != nil {
		tr.t.Error(err)
	}
	tr.faultAt = time.Now() // detection counts from the write's answer
	if err := do(tr.peerKey); err != nil {
		tr.t.Error(err)
	}
}

var faults = []fault{
	{faulttrial.Fault{Name: "A's link silent both ways", Want: faulttrial.NoOverlap}, nil, viaProxy, func(tr *trial) {
		tr.s.p.Drop(faultnet.Both)
	}},
	{faulttrial.Fault{Name: "A's requests dropped (silent toward the server)", Want: faulttrial.NoOverlap}, nil, viaProxy, func(tr *trial) {
		tr.s.p.Drop(faultnet.ToServer)
	}},
	// The server still stores A's renewals: B is never granted, and A
	// must be lost, since it can no longer know.
	{faulttrial.Fault{Name: "A's answers dropped (the server still hears A)", Want: faulttrial.LossNeeded}, nil, viaProxy, func(tr *trial) {
		tr.bound = 3 * faultTTL
		tr.s.p.Drop(faultnet.ToClient)
	}},
	{faulttrial.Fault{Name: "link slowed above the TTL (2.5 s each way)", Want: faulttrial.NoOverlap}, nil, viaProxy, func(tr *trial) {
		tr.s.p.Delay(faultTTL + faultTTL/4)
	}},
	{faulttrial.Fault{Name: "benign latency (250 ms each way, a round trip of a quarter of the TTL)", Want: faulttrial.NoLoss}, nil, viaProxy, func(tr *trial) {
		tr.s.p.Delay(faultTTL / 8)
	}},
	{faulttrial.Fault{Name: "connection reset", Want: faulttrial.NoLoss}, nil, viaProxy, func(tr *trial) {
		tr.s.p.Cut()
	}},
	// The delete reaches A's watcher and B's at once: A is lost as it
	// reads it, B granted a Create later.
	{faulttrial.Fault{Name: "key deleted by an operator", Want: faulttrial.Raced}, nil, viaProxy, func(tr *trial) {
		both(tr, func(key string) error { return tr.ops.Delete(tr.t.Context(), key) })
	}},
	{faulttrial.Fault{Name: "key purged by an operator", Want: faulttrial.Raced}, nil, viaProxy, func(tr *trial) {
		both(tr, func(key string) error { return tr.ops.Purge(tr.t.Context(), key) })
	}},
	// Overwritten without a TTL, the key is no one's: B waits for a key
	// that never expires, and A must be lost.
	{faulttrial.Fault{Name: "key overwritten by an operator (put)", Want: faulttrial.NoOverlap}, nil, viaProxy, func(tr *trial) {
		tr.bound = 3 * faultTTL
		both(tr, func(key string) error { _, err := tr.ops.Put(tr.t.Context(), key, []byte("operator")); return err })
	}},
	{faulttrial.Fault{Name: "server paused (SIGSTOP) for two TTLs", Want: faulttrial.NoOverlap}, ownServer, direct, func(tr *trial) {
		s := tr.s.env.s
		if err := s.Pause(); err != nil {
			tr.t.Error(err)
		}
		time.Sleep(2 * faultTTL)
		if err := s.Resume(); err != nil {
			tr.t.Error(err)
		}
	}},
	{faulttrial.Fault{Name: "server killed (SIGKILL), restarted with its data two TTLs later", Want: faulttrial.NoOverlap}, ownServer, direct, func(tr *trial) {
		s := tr.s.env.s
		s.Kill()
		time.Sleep(2 * faultTTL)
		if err := s.Start(); err != nil {
			tr.t.Error(err)
		}
	}},
	{faulttrial.Fault{Name: "cluster: the bucket's stream leader steps down", Want: faulttrial.NoLoss}, ownCluster, direct, func(tr *trial) {
		ctx, cancel := context.WithTimeout(tr.t.Context(), 10*time.Second)
		defer cancel()
		if err := natstest.StepDownStream(ctx, tr.s.direct(), "KV_"+natslease.DefaultBucket); err != nil {
			tr.t.Error(err)
		}
	}},
	{faulttrial.Fault{Name: "cluster: the JetStream meta leader steps down", Want: faulttrial.NoLoss}, ownCluster, direct, func(tr *trial) {
		ctx, cancel := context.WithTimeout(tr.t.Context(), 10*time.Second)
		defer cancel()
		if err := tr.s.env.c.StepDownMeta(ctx); err != nil {
			tr.t.Error(err)
		}
	}},
}

// TestFaults puts A, and the hand-written A′ beside it, through the
// faults leases exist for; each must show what its row says, and A′'s
// figures are recorded beside A's. -faults.trials sets the trials per
// fault.
func TestFaults(t *testing.T) {
	book := &faulttrial.Book{Peer: peerName}
	var tokens tokenLog
	// The rows on servers of their own that must lose A (the server
	// paused, killed) wait out the server's fault and two TTLs: they run
	// side by side, after the others, and share nothing with them. The
	// rows that count false losses run alone.
	t.Run("rows", func(t *testing.T) { runRows(t, book, &tokens) })
	book.Check(t)
	if tokens.checked > tokens.up {
		t.Errorf("tokens must grow with every grant: %s", tokens.line())
	}
	table := book.Table(*faultCommand) + "\n" + tokens.line() + "\n"
	t.Logf("\n%s", table)
	if *faultReadme != "" {
		if err := faulttrial.WriteTable(*faultReadme, table); err != nil {
			t.Fatal(err)
		}
	}
}

func runRows(t *testing.T, book *faulttrial.Book, tokens *tokenLog) {
	for _, f := range faults {
		t.Run(f.Name, func(t *testing.T) {
			if f.env != nil && f.Want != faulttrial.NoLoss {
				t.Parallel()
			}
			newEnv := f.env
			if newEnv == nil {
				newEnv = sharedEnv
			}
			e := newEnv(t)
			faulttrial.Concurrently(*faultTrials, f.atOnce(), func(i int) {
				s := f.setup(t, e)
				defer s.close()
				tr := startTrial(t, s, i)
				atRandomPhase()
				tr.faultAt = time.Now()
				f.apply(tr)
				res := tr.finish(f.Fault)
				book.Add(f.Fault, res)
				if res.Granted {
					tokens.add(tr.a.Token(), tr.grantedToken)
				}
			})
		})
	}
}

// tokenLog records, for each trial where B was granted, whether B's token
// was larger than A's.
type tokenLog struct {
	mu      sync.Mutex
	checked int
	up      int
}

func (l *tokenLog) add(a, b int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checked++
	if b > a {
		l.up++
	}
}

func (l *tokenLog) line() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("Tokens: B's token was larger than A's in %d of the %d trials where B was granted.", l.up, l.checked)
}
