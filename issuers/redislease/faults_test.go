package redislease_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

var (
	faultTrials  = flag.Int("faults.trials", 3, "trials of each fault of TestFaults")
	faultReadme  = flag.String("faults.readme", "", "the README whose faults table TestFaults writes, if any")
	faultCommand = flag.String("faults.command", "make e2e-redis", "the command named under the faults table")
)

const (
	// faultTTL is the TTL of the fault trials, A's and A′'s alike.
	faultTTL = 2 * time.Second
	// grantBound bounds the wait for B's grant after a fault: a failover
	// within redistest.FailoverWithin, then, behind Sentinel, a replica
	// that follows the new primary for a TTL, then A's key's expiry.
	grantBound = redistest.FailoverWithin + 3*faultTTL
	// benignWindow is how long a benign fault lasts: two TTLs, in which a
	// lease that could not renew would have been lost.
	benignWindow = 2 * faultTTL
	// holdersAtOnce bounds the trials that share the primary at once.
	holdersAtOnce = 6
)

var faultCfg = redislease.Config{TTL: faultTTL}

// peerName says what A′ is, under the table.
const peerName = "redsync's Mutex (go-redsync/redsync/v4 on its go-redis v9 pool, expiry 2 s, extended every 667 ms, a third of the expiry, " +
	"as its README's long-running-task pattern does), its loss taken when an Extend fails or returns false, and B′'s grant when its Lock returns"

// peerHolder is A′: a redsync Mutex held and extended in a goroutine.
type peerHolder struct {
	lost   chan time.Time // when an Extend failed, once
	cancel context.CancelFunc
	done   chan struct{}
	m      *redsync.Mutex
}

func newMutex(rdb redis.UniversalClient, name string, opts ...redsync.Option) *redsync.Mutex {
	return redsync.New(goredis.NewPool(rdb)).NewMutex(name, append([]redsync.Option{redsync.WithExpiry(faultTTL)}, opts...)...)
}

// holdPeer locks name with redsync and extends it every third of the
// expiry until an Extend fails.
func holdPeer(ctx context.Context, rdb redis.UniversalClient, name string) (*peerHolder, error) {
	// redsync gives a try a twentieth of the expiry, 100 ms: too little
	// for a client's first dial, which asks a Sentinel first. A Ping
	// makes that dial outside the try.
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("A′'s client: %w", err)
	}
	m := newMutex(rdb, name, redsync.WithTries(1))
	if err := m.LockContext(ctx); err != nil {
		return nil, fmt.Errorf("A′'s Lock: %w", err)
	}
	ectx, cancel := context.WithCancel(context.Background())
	p := &peerHolder{lost: make(chan time.Time, 1), cancel: cancel, done: make(chan struct{}), m: m}
	go func() {
		defer close(p.done)
		t := time.NewTicker(faultTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ectx.Done():
				return
			case <-t.C:
			}
			ok, err := m.ExtendContext(ectx)
			if ectx.Err() != nil {
				return
			}
			if err != nil || !ok {
				p.lost <- time.Now()
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
	p.m.UnlockContext(ctx)
}

// waitPeer is B′: a redsync Lock that tries every 20 ms until ctx ends; the
// time it was granted arrives on the channel returned.
func waitPeer(ctx context.Context, rdb redis.UniversalClient, name string) <-chan time.Time {
	c := make(chan time.Time, 1)
	m := newMutex(rdb, name, redsync.WithTries(1<<30), redsync.WithRetryDelay(20*time.Millisecond))
	go func() {
		if err := m.LockContext(ctx); err == nil {
			c <- time.Now()
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			m.UnlockContext(uctx)
		}
		close(c)
	}()
	return c
}

// setup is where a trial's holders connect: viaA for A and A′ (through the
// fault), direct for B, B′ and the operator.
type setup struct {
	viaA, direct func() redis.UniversalClient
	p            *faultnet.Proxy      // A's proxy, for network faults
	s            *redistest.Server    // the server, for server faults
	g            *redistest.Group     // the group, for failovers
	c            *redistest.Cluster   // the Cluster, for a slot's failover
	ops          func() *redis.Client // the operator's client to the primary
	cleanup      []func()             // run after the trial
	mu           sync.Mutex
}

func (s *setup) newClient(opt *redis.Options) redis.UniversalClient {
	c := redis.NewClient(opt)
	s.mu.Lock()
	s.cleanup = append(s.cleanup, func() { c.Close() })
	s.mu.Unlock()
	return c
}

func (s *setup) newFailover(g *redistest.Group) redis.UniversalClient {
	c := redis.NewFailoverClient(g.FailoverOptions())
	s.mu.Lock()
	s.cleanup = append(s.cleanup, func() { c.Close() })
	s.mu.Unlock()
	return c
}

func (s *setup) close() {
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
}

// viaProxy is the setup of a network fault: a proxy of the trial's own in
// front of srv.
func viaProxy(t *testing.T, srv *redistest.Server) *setup {
	p, err := faultnet.Listen(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s := &setup{p: p, s: srv}
	s.viaA = func() redis.UniversalClient { return s.newClient(&redis.Options{Addr: p.Addr()}) }
	s.direct = func() redis.UniversalClient { return s.newClient(&redis.Options{Addr: srv.Addr()}) }
	s.ops = func() *redis.Client { return s.direct().(*redis.Client) }
	s.cleanup = append(s.cleanup, func() { p.Close() })
	return s
}

// ownServer is the setup of a server fault: a standalone server of the
// trial's own.
func ownServer(t *testing.T) *setup {
	srv, err := redistest.NewServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := &setup{s: srv}
	s.viaA = func() redis.UniversalClient { return s.newClient(&redis.Options{Addr: srv.Addr()}) }
	s.direct = s.viaA
	s.ops = func() *redis.Client { return s.direct().(*redis.Client) }
	s.cleanup = append(s.cleanup, srv.Kill)
	return s
}

// ownGroup is the setup of a failover: a primary, two replicas and three
// Sentinels of the trial's own; every holder uses a Sentinel client.
func ownGroup(t *testing.T) *setup {
	g := redistest.StartGroup(t, 2)
	s := &setup{g: g, s: g.Primary}
	s.viaA = func() redis.UniversalClient { return s.newFailover(g) }
	s.direct = s.viaA
	s.ops = func() *redis.Client { return s.newFailover(g).(*redis.Client) }
	return s
}

// ownCluster is the setup of a slot's failover: a Cluster of three
// primaries and three replicas of the trial's own; every holder uses a
// Cluster client.
func ownCluster(t *testing.T) *setup {
	c := redistest.StartCluster(t)
	s := &setup{c: c}
	s.viaA = func() redis.UniversalClient {
		cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		s.mu.Lock()
		s.cleanup = append(s.cleanup, func() { cl.Close() })
		s.mu.Unlock()
		return cl
	}
	s.direct = s.viaA
	return s
}

// trial is one run of a fault: A and redsync's A′ through the fault, each
// with a waiting holder (B, B′) outside it.
type trial struct {
	t       *testing.T
	s       *setup
	key     string
	peerKey string
	a       *redislease.Lease
	stamp   *faulttrial.Stamp
	bc      <-chan granted
	cancelB context.CancelFunc
	aPrime  *peerHolder
	bPrime  <-chan time.Time
	faultAt time.Time
	// bound, if not zero, replaces grantBound: B is never granted.
	bound time.Duration
	// grantedToken is B's token, once granted.
	grantedToken int64
}

func startTrial(t *testing.T, s *setup, n int) *trial {
	t.Helper()
	// A's key and A′'s share a hash tag: on a Cluster, one slot, which
	// one fault hits.
	tr := &trial{t: t, s: s, key: fmt.Sprintf("{%s-%d}", keyName(t), n)}
	tr.peerKey = tr.key + "-peer"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var err error
	if tr.a, err = faultCfg.Lock(ctx, s.viaA(), tr.key); err != nil {
		t.Fatalf("A's Lock: %v", err)
	}
	tr.stamp = faulttrial.StampWhen(tr.a.Signal().Done())
	if tr.aPrime, err = holdPeer(ctx, s.viaA(), tr.peerKey); err != nil {
		t.Fatal(err)
	}
	bctx, cancelB := context.WithCancel(context.Background())
	tr.cancelB = cancelB
	tr.bc = lockAsync(bctx, faultCfg, s.direct(), tr.key)
	tr.bPrime = waitPeer(bctx, s.direct(), tr.peerKey)
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
	timeout := time.After(bound)
	var pLostAt, pGrantAt time.Time
	var pLost, pGranted bool
	// A′'s loss and B′'s grant are watched beside A's and B's: an A′ that
	// is never told must not hold the trial up past B's bound. Where A
	// must be lost, its loss is waited for too, up to the bound: in a
	// raced row it may come a moment after B's grant, and the trial must
	// not end before it.
	aDone := tr.a.Signal().Done()
	aLost := f.Want == faulttrial.NoLoss
	for !gotB || !pLost || !pGranted || !aLost {
		select {
		case <-aDone:
			aLost = true
			aDone = nil
		case b = <-tr.bc:
			gotB = true
			tr.bc = nil
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
		if gotB && f.Want != faulttrial.NoLoss && pGranted && pLost && aLost {
			break
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
	return res
}

type fault struct {
	faulttrial.Fault
	setup func(t *testing.T) *setup
	apply func(tr *trial) // starts the fault; may set faultAt later than its start
}

// atOnce is how many trials of f run side by side: faults on a Sentinel
// group or a Cluster of each trial's own three (their time is the wait for
// a failover, not work), other server faults one at a time, benign faults
// two (they count false losses, and the load of many trials at once on a
// 2-core machine is not part of the fault).
func (f fault) atOnce() int {
	switch {
	case f.beside():
		return 3
	case f.setup != nil:
		return 1
	case f.Want == faulttrial.NoLoss:
		return 2
	}
	return holdersAtOnce
}

// beside reports whether f's trials start a Sentinel group or a Cluster
// of their own: such rows run beside each other, after the others.
func (f fault) beside() bool {
	if f.setup == nil {
		return false
	}
	p := reflect.ValueOf(f.setup).Pointer()
	return p == reflect.ValueOf(ownGroup).Pointer() || p == reflect.ValueOf(ownCluster).Pointer()
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
	{faulttrial.Fault{Name: "A's network silent both ways", Want: faulttrial.NoOverlap}, nil, func(tr *trial) {
		tr.s.p.Drop(faultnet.Both)
	}},
	{faulttrial.Fault{Name: "A's requests dropped (silent toward Redis)", Want: faulttrial.NoOverlap}, nil, func(tr *trial) {
		tr.s.p.Drop(faultnet.ToServer)
	}},
	{faulttrial.Fault{Name: "A's answers dropped (Redis still hears A)", Want: faulttrial.LossNeeded}, nil, func(tr *trial) {
		tr.s.p.Drop(faultnet.ToClient)
	}},
	{faulttrial.Fault{Name: "latency above the TTL (2.5 s each way)", Want: faulttrial.NoOverlap}, nil, func(tr *trial) {
		tr.s.p.Delay(faultTTL + faultTTL/4)
	}},
	{faulttrial.Fault{Name: "benign latency (250 ms each way, a round trip of a quarter of the TTL)", Want: faulttrial.NoLoss}, nil, func(tr *trial) {
		tr.s.p.Delay(faultTTL / 8)
	}},
	{faulttrial.Fault{Name: "connection reset", Want: faulttrial.NoLoss}, nil, func(tr *trial) {
		tr.s.p.Cut()
	}},
	// Overwritten, the key is no one's: B waits for a key that never
	// expires, and A must be lost.
	{faulttrial.Fault{Name: "key overwritten by an operator (SET)", Want: faulttrial.NoOverlap}, nil, func(tr *trial) {
		tr.bound = 3 * faultTTL
		op := tr.s.ops()
		both(tr, func(key string) error { return op.Set(tr.t.Context(), key, "operator", 0).Err() })
	}},
	// The deletion reaches A's tracking and B's at once, but the key's
	// claim lives on: B waits for it to run out or for A, lost, to give it
	// back.
	{faulttrial.Fault{Name: "key deleted by an operator (DEL)", Want: faulttrial.NoOverlap}, nil, func(tr *trial) {
		op := tr.s.ops()
		both(tr, func(key string) error { return op.Del(tr.t.Context(), key).Err() })
	}},
	{faulttrial.Fault{Name: "FLUSHALL by an operator", Want: faulttrial.Raced}, ownServer, func(tr *trial) {
		if err := tr.s.ops().FlushAll(tr.t.Context()).Err(); err != nil {
			tr.t.Error(err)
		}
		tr.faultAt = time.Now()
	}},
	// Every client reconnects to an empty server: A learns the key is gone
	// as B finds it free.
	{faulttrial.Fault{Name: "primary restarted without persistence", Want: faulttrial.Raced}, ownServer, func(tr *trial) {
		tr.s.s.Kill()
		if err := tr.s.s.Start(); err != nil {
			tr.t.Error(err)
		}
	}},
	{faulttrial.Fault{Name: "primary paused (SIGSTOP) until Sentinel fails it over", Want: faulttrial.NoOverlap}, ownGroup, func(tr *trial) {
		old := tr.s.g.Primary
		if err := old.Pause(); err != nil {
			tr.t.Error(err)
		}
		tr.s.cleanup = append(tr.s.cleanup, func() { old.Resume() })
		ctx, cancel := context.WithTimeout(tr.t.Context(), redistest.FailoverWithin)
		defer cancel()
		if _, err := tr.s.g.WaitFailover(ctx, old.Addr()); err != nil {
			tr.t.Error(err)
		}
	}},
	{faulttrial.Fault{Name: "Cluster: the primary of the key's slot killed, its replica takes over", Want: faulttrial.NoOverlap}, ownCluster, func(tr *trial) {
		c := tr.s.c
		master, err := redistest.MasterOf(tr.t.Context(), c.Nodes[0].Addr(), tr.key)
		if err != nil {
			tr.t.Error(err)
			return
		}
		c.Node(master).Kill()
	}},
	{faulttrial.Fault{Name: "primary killed (SIGKILL), Sentinel fails over", Want: faulttrial.NoOverlap}, ownGroup, func(tr *trial) {
		tr.s.g.Primary.Kill()
	}},
	// Renewals reach the primary, not its replicas: they must not move
	// A's deadline, since the replica promoted next expires the key at the
	// last write it had.
	{faulttrial.Fault{Name: "replication links cut, then the primary killed and failed over", Want: faulttrial.NoOverlap}, ownGroup, func(tr *trial) {
		for _, l := range tr.s.g.Links {
			l.Drop(faultnet.Both)
		}
		time.Sleep(faultTTL)
		tr.s.g.Primary.Kill()
	}},
}

// TestFaults puts A, and redsync's Mutex A′ beside it, through the faults
// leases exist for; each must show what its row says, and A′'s figures are
// recorded beside A's. -faults.trials sets the trials per fault.
func TestFaults(t *testing.T) {
	book := &faulttrial.Book{Peer: peerName}
	var tokens tokenLog
	// Each row's trials are added to the book in the rows' order, once
	// all ran: the table's order is the list's.
	type outcome struct {
		res      faulttrial.Trial
		a, b     int64
		recorded bool
	}
	outcomes := make([][]outcome, len(faults))
	row := func(k int, f fault) {
		outcomes[k] = make([]outcome, *faultTrials)
		t.Run(f.Name, func(t *testing.T) {
			faulttrial.Concurrently(*faultTrials, f.atOnce(), func(i int) {
				var s *setup
				if f.setup == nil {
					s = viaProxy(t, shared)
				} else {
					s = f.setup(t)
				}
				defer s.close()
				tr := startTrial(t, s, i)
				atRandomPhase()
				tr.faultAt = time.Now()
				f.apply(tr)
				res := tr.finish(f.Fault)
				outcomes[k][i] = outcome{res, tr.a.Token(), tr.grantedToken, true}
			})
		})
	}
	// The rows on servers of their trials' own run beside each other,
	// once the rows that share the test's server (and count its false
	// losses) are done: their time is the wait for failovers.
	for k, f := range faults {
		if !f.beside() {
			row(k, f)
		}
	}
	var wg sync.WaitGroup
	for k, f := range faults {
		if f.beside() {
			wg.Go(func() { row(k, f) })
		}
	}
	wg.Wait()
	for k, f := range faults {
		for _, o := range outcomes[k] {
			if !o.recorded {
				continue // the trial stopped the test
			}
			book.Add(f.Fault, o.res)
			if o.res.Granted {
				tokens.add(f.Name, o.a, o.b)
			}
		}
	}
	paused := pausedTrials(t, *faultTrials)
	book.Check(t)
	if tokens.checked > tokens.up {
		t.Errorf("tokens must grow with every grant: %s", tokens.line())
	}
	table := book.Table(*faultCommand) + "\n" + tokens.line() + "\n\n" + paused + "\n"
	t.Logf("\n%s", table)
	if *faultReadme != "" {
		if err := faulttrial.WriteTable(*faultReadme, table); err != nil {
			t.Fatal(err)
		}
	}
}

// tokenLog records, for each trial where B was granted, A's token and B's.
type tokenLog struct {
	mu      sync.Mutex
	checked int
	up      int
	resets  map[string]int // trials of each fault where B's token was not larger
	order   []string
}

func (l *tokenLog) add(fault string, a, b int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checked++
	if b > a {
		l.up++
		return
	}
	if l.resets == nil {
		l.resets = map[string]int{}
	}
	if l.resets[fault] == 0 {
		l.order = append(l.order, fault)
	}
	l.resets[fault]++
}

func (l *tokenLog) line() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := fmt.Sprintf("Tokens: B's token was larger than A's in %d of the %d trials where B was granted", l.up, l.checked)
	if len(l.order) > 0 {
		var parts []string
		for _, f := range l.order {
			parts = append(parts, fmt.Sprintf("%d trials of %q", l.resets[f], f))
		}
		s += "; not larger in " + strings.Join(parts, " and ")
	}
	return s + "."
}
