package redislease_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/issuers/redislease/internal/manyleases"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

// TestManyLeases holds 1,000 leases of one client on the shared server, as
// make bench-many-redis does with more: they share the session's two
// connections and its goroutines, none is lost while held, and an
// operator's DEL of one key loses that lease by the push, and no other.
// The figures (the time to grant, the commands a second, the heap a lease,
// the time from the DEL to the loss) are logged, not checked; the README's
// table has them from make bench-many-redis.
func TestManyLeases(t *testing.T) {
	manyLeases(t, manyleases.Config{Addr: shared.Addr()}, shared.Addr())
}

// TestManyLeasesSentinel is TestManyLeases through a Sentinel client: the
// leases share one session on the primary Sentinel names.
func TestManyLeasesSentinel(t *testing.T) {
	g := redistest.StartGroup(t, 2)
	manyLeases(t, manyleases.Config{
		Addr:   g.Primary.Addr(),
		Client: func() redis.UniversalClient { return redis.NewFailoverClient(g.FailoverOptions()) },
	}, g.Primary.Addr())
}

// TestManyLeasesCluster is TestManyLeases through a Cluster client: the
// leases share one session on each primary that serves a slot of theirs.
func TestManyLeasesCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	manyLeases(t, manyleases.Config{
		Addr:   c.Nodes[0].Addr(),
		Client: func() redis.UniversalClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}) },
	}, c.Addrs()...)
}

// manyLeases holds 1,000 leases through c's client and checks what
// TestManyLeases says, the connections on each of servers among them.
func manyLeases(t *testing.T, c manyleases.Config, servers ...string) {
	t.Helper()
	c.N = 1000
	c.Hold = 4 * time.Second // a renewal of each lease at least
	c.TTL = 3 * time.Second
	c.Prefix = keyName(t) + "-"
	var conns []int
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	held := make(chan struct{})
	go func() {
		// Counted in the middle of the hold.
		select {
		case <-ctx.Done():
			close(held)
			return
		case <-time.After(c.Hold / 2):
		}
		for _, s := range servers {
			conns = append(conns, leaseConns(t, s))
		}
		close(held)
	}()
	r, err := manyleases.Lease(t.Context(), c)
	<-held
	if err != nil {
		t.Fatal(err)
	}
	t.Log(manyleases.Header)
	t.Log(r.Row())
	t.Logf("DEL of one key: its lease lost %v after the DEL returned", r.DelLoss)
	if r.FalseLosses != 0 {
		t.Errorf("%d of %d leases lost while held with no fault, one with: %s", r.FalseLosses, c.N, r.FirstLoss)
	}
	// The server's other clients are the tests' own, closed by now but
	// for the shared ones: far fewer than 16.
	for i, n := range conns {
		if n > 16 {
			t.Errorf("%d clients' connections on %s while holding %d leases, want at most 16", n, servers[i], c.N)
		}
	}
	t.Logf("clients' connections on the servers while holding: %v", conns)
	if per := float64(r.Goroutines) / float64(c.N); per > 0.05 {
		t.Errorf("%d goroutines for %d leases (%.3f a lease), want at most 0.05 a lease", r.Goroutines, c.N, per)
	}
	if r.DelLoss > lossWithin {
		t.Errorf("the lease of the deleted key was lost %v after the DEL, want within %v (a push)", r.DelLoss, lossWithin)
	}
	if r.DelOthers != 0 {
		t.Errorf("the DEL of one key lost %d other leases, want none", r.DelOthers)
	}
}

// leaseConns returns how many clients' connections the server at addr
// has, its Sentinels' and replicas' left out, the one asking too.
func leaseConns(t *testing.T, addr string) int {
	t.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer admin.Close()
	list, err := admin.Do(context.Background(), "CLIENT", "LIST", "TYPE", "normal").Text()
	if err != nil {
		t.Error(err)
		return 0
	}
	n := 0
	for line := range strings.Lines(list) {
		if !strings.Contains(line, " name=sentinel-") {
			n++
		}
	}
	return n - 1
}

// TestLockCycleDialsNothing: once a client's session is up, Lock and
// Unlock open no connection, from one goroutine and from 32 at once on
// distinct keys.
func TestLockCycleDialsNothing(t *testing.T) {
	rdb := client(t, shared.Addr())
	op := client(t, shared.Addr())
	mustLock(t, short, rdb, keyName(t)).Unlock(t.Context()) // the session dials
	before := totalConnections(t, op)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 20 {
				l, err := short.Lock(t.Context(), rdb, keyName(t))
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Unlock(t.Context()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if after := totalConnections(t, op); after != before {
		t.Errorf("640 Lock→Unlock cycles opened %d connections, want none", after-before)
	}
}

// TestLockCycleCommands: once a client's session is up, a Lock→Unlock
// cycle on a server without replicas sends two commands, the grant script
// and the release script, each a round trip of its own, as bsm/redislock's
// SET NX PX and release script are: two EVALs a cycle, and no command
// that the scripts do not run themselves.
func TestLockCycleCommands(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := client(t, srv.Addr())
	admin := client(t, srv.Addr())
	mustLock(t, short, rdb, keyName(t)).Unlock(t.Context()) // the session dials
	calls := func() map[string]int64 {
		t.Helper()
		info, err := admin.Info(t.Context(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for line := range strings.Lines(info) {
			name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
			if !ok {
				continue
			}
			n, _, _ := strings.Cut(rest, ",")
			m[name], _ = strconv.ParseInt(n, 10, 64)
		}
		return m
	}
	// What the grant and release scripts call inside, besides the EVALs.
	inside := map[string]bool{"time": true, "get": true, "set": true, "incr": true, "pexpire": true, "pttl": true, "del": true, "info": true}
	const cycles = 100
	before := calls()
	for range cycles {
		l, err := short.Lock(t.Context(), rdb, keyName(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	after := calls()
	if n := after["eval"] - before["eval"]; n != 2*cycles {
		t.Errorf("%d Lock→Unlock cycles sent %d EVALs, want %d (two a cycle)", cycles, n, 2*cycles)
	}
	for name, n := range after {
		if d := n - before[name]; d != 0 && name != "eval" && !inside[name] {
			t.Errorf("%d Lock→Unlock cycles sent %d %s, want none", cycles, d, name)
		}
	}
}
