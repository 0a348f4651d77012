package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/internal/faultnet"
)

// GroupName is the name the Sentinels of a [Group] know its primary by.
const GroupName = "leasegroup"

// DownAfter is how long the Sentinels of a [Group] wait for a silent
// primary before they call it down and fail it over: longer than the 2 s TTL
// of the fault trials, so that a holder cut off from its primary reaches its
// deadline before the failover, as it would in most deployments (Sentinel's
// default is 30 s). With a shorter wait, a holder may instead keep its lease
// on the promoted replica, which holds its key.
const DownAfter = 2500 * time.Millisecond

// A Group is a primary, its replicas, and three Sentinels watching them.
// Replica i replicates through Links[i], a proxy whose faults cut its
// replication link; once a failover reconfigured it, it replicates from the
// new primary directly.
//
// A Sentinel sets a replica that replicates from another address than the
// primary's (the proxy's) to the primary's own, once the replica's
// configuration is older than the failover timeout ("+fix-slave-config"):
// the Sentinels keep their default failover timeout, 3 minutes, so that the
// links stay in place for the life of a test.
type Group struct {
	Primary   *Server
	Replicas  []*Server
	Links     []*faultnet.Proxy
	Sentinels []*Server
	closers   []func()
}

// StartGroup starts a primary, n replicas and three Sentinels, waits until
// every replica is in sync and every Sentinel knows them, and stops it all
// when tb ends.
func StartGroup(tb testing.TB, n int) *Group {
	tb.Helper()
	g, err := NewGroup(tb.TempDir(), n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(g.Close)
	return g
}

// NewGroup starts a group as StartGroup does, its servers in folders under
// dir; the caller stops it with Close.
func NewGroup(dir string, n int) (g *Group, err error) {
	g = &Group{}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	sub := func(name string) (string, error) {
		d := filepath.Join(dir, name)
		return d, os.MkdirAll(d, 0o755)
	}
	d, err := sub("primary")
	if err != nil {
		return g, err
	}
	if g.Primary, err = NewServer(d); err != nil {
		return g, err
	}
	g.closers = append(g.closers, g.Primary.Kill)
	for i := range n {
		link, err := faultnet.Listen(g.Primary.Addr())
		if err != nil {
			return g, err
		}
		g.closers = append(g.closers, func() { link.Close() })
		host, port, _ := strings.Cut(link.Addr(), ":")
		g.Links = append(g.Links, link)
		d, err := sub(fmt.Sprintf("replica%d", i))
		if err != nil {
			return g, err
		}
		r, err := NewServer(d, "--replicaof", host, port)
		if err != nil {
			return g, err
		}
		g.closers = append(g.closers, r.Kill)
		g.Replicas = append(g.Replicas, r)
	}
	sbin, err := SentinelBinary()
	if err != nil {
		return g, err
	}
	for i := range 3 {
		d, err := sub(fmt.Sprintf("sentinel%d", i))
		if err != nil {
			return g, err
		}
		port, err := FreePort()
		if err != nil {
			return g, err
		}
		conf := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s 180000
sentinel parallel-syncs %s %d
`, port, d, filepath.Join(d, "redis.log"), GroupName, g.Primary.Port, GroupName, DownAfter.Milliseconds(), GroupName, GroupName, max(1, n))
		file := filepath.Join(d, "sentinel.conf")
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			return g, err
		}
		s := &Server{Port: port, Dir: d, bin: sbin, args: []string{file}}
		if err := s.Start(); err != nil {
			return g, err
		}
		g.closers = append(g.closers, s.Kill)
		g.Sentinels = append(g.Sentinels, s)
	}
	return g, g.waitReady(n)
}

// Close stops every server and proxy of the group.
func (g *Group) Close() {
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i]()
	}
	g.closers = nil
}

// waitReady waits until the primary lists n replicas online and every
// Sentinel knows n replicas and two other Sentinels.
func (g *Group) waitReady(n int) error {
	// A minute: on a loaded 2-core machine, the Sentinels took more than
	// 30 s to find each other once in 30 starts.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := redis.NewClient(&redis.Options{Addr: g.Primary.Addr()})
	defer p.Close()
	for {
		ok := true
		info, err := p.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "connected_slaves:"+strconv.Itoa(n)) || strings.Count(info, "state=online") != n {
			ok = false
		}
		for _, s := range g.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
			reps, err1 := sc.Replicas(ctx, GroupName).Result()
			sens, err2 := sc.Sentinels(ctx, GroupName).Result()
			sc.Close()
			if err1 != nil || err2 != nil || len(reps) != n || len(sens) != 2 {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redistest: the group was not ready within a minute: %v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SentinelAddrs returns the Sentinels' addresses.
func (g *Group) SentinelAddrs() []string {
	var a []string
	for _, s := range g.Sentinels {
		a = append(a, s.Addr())
	}
	return a
}

// FailoverOptions returns the options of a Sentinel client of the group.
func (g *Group) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: GroupName, SentinelAddrs: g.SentinelAddrs()}
}

// FailoverClient returns a Sentinel client of its own (redis.NewFailoverClient),
// closed when tb ends.
func (g *Group) FailoverClient(tb testing.TB) *redis.Client {
	c := redis.NewFailoverClient(g.FailoverOptions())
	tb.Cleanup(func() { c.Close() })
	return c
}

// Master returns the primary's address as the first Sentinel that answers
// names it.
func (g *Group) Master(ctx context.Context) (string, error) {
	var last error
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
		a, err := sc.GetMasterAddrByName(ctx, GroupName).Result()
		sc.Close()
		if err == nil {
			return a[0] + ":" + a[1], nil
		}
		last = err
	}
	return "", last
}

// WaitFailover waits until the Sentinels name a primary other than from,
// and returns its address.
func (g *Group) WaitFailover(ctx context.Context, from string) (string, error) {
	for {
		a, err := g.Master(ctx)
		if err == nil && a != from {
			return a, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("redistest: no failover from %s: %w", from, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Server returns the server of the group at addr, or nil.
func (g *Group) Server(addr string) *Server {
	for _, s := range append([]*Server{g.Primary}, g.Replicas...) {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}
