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

// TiltPeriod is how long a Sentinel of a [Group] does not act after its
// timer stalled for more than 2 s (Sentinel's TILT mode, set with SENTINEL
// DEBUG tilt-period): on a loaded machine every process may stall that
// long at once. Sentinel's default, 30 s, is longer than a test waits for a
// failover; DownAfter leaves every server time to answer a Sentinel's PING,
// sent every second, before the Sentinel judges it again.
const TiltPeriod = DownAfter

// FailoverWithin bounds the wait for a failover of a [Group], from its
// primary's death or stop to the Sentinels naming a replica. Undisturbed, a
// failover takes at most DownAfter, a second (Sentinel's ask period) for
// the two candidates to agree that the primary is down, and a second (the
// period of INFO during a failover) to see the replica promoted: 4.5 s.
// Each stall of the machine over 2 s adds itself and TiltPeriod. The
// bound, ten times DownAfter, is also as late as the Sentinels may call
// the primary down and still promote a replica: Sentinel passes over a
// replica whose link has been down for longer than ten times down-after
// plus the time since it called the primary down
// ("-failover-abort-no-good-slave").
const FailoverWithin = 10 * DownAfter

// failoverTimeout is the Sentinels' failover-timeout, their default. A
// Sentinel sets a replica that replicates from another address than the
// primary's (its link's) to the primary's own once the replica's
// configuration is older than the failover timeout ("+fix-slave-config"):
// the timeout keeps the links in place for the life of a test. It is also
// why a failover must not fail once: a Sentinel that started or voted for
// a failover that did not happen does not start another for twice the
// failover timeout, 6 minutes ("Next failover delay").
const failoverTimeout = 3 * time.Minute

// voterDownAfter is the down-after of the third Sentinel of a [Group], the
// voter: longer than any test, so that it never calls the primary down and
// never starts a failover. Three Sentinels that start one at once, as they
// do when a stall ends and their timers fire together, each vote for
// themselves and none is elected ("-failover-abort-not-elected"); with two
// candidates, the voter's vote elects one of them.
const voterDownAfter = 24 * time.Hour

// A Group is a primary, its replicas, and three Sentinels watching them.
// Replica i replicates through Links[i], a proxy whose faults cut its
// replication link; once a failover reconfigured it, it replicates from the
// new primary directly.
//
// Sentinels[0] and Sentinels[1] call the primary down after DownAfter and
// may lead a failover; Sentinels[2] only votes. A failover takes at most
// [FailoverWithin].
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
	g.closers = append(g.closers, g.Primary.Close)
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
		g.closers = append(g.closers, r.Close)
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
		downAfter := DownAfter
		if i == 2 {
			downAfter = voterDownAfter
		}
		s, err := startOnOwnPort(d, sbin, func(port int) ([]string, error) {
			conf := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s %d
`, port, d, filepath.Join(d, "redis.log"), GroupName, g.Primary.Port, GroupName, downAfter.Milliseconds(),
				GroupName, failoverTimeout.Milliseconds(), GroupName, max(1, n))
			file := filepath.Join(d, "sentinel.conf")
			return []string{file}, os.WriteFile(file, []byte(conf), 0o644)
		})
		if err != nil {
			return g, err
		}
		g.closers = append(g.closers, s.Close)
		g.Sentinels = append(g.Sentinels, s)
		if err := setTiltPeriod(s); err != nil {
			return g, err
		}
	}
	return g, g.waitReady(n)
}

// setTiltPeriod sets the Sentinel's TiltPeriod, which its configuration
// file cannot hold.
func setTiltPeriod(s *Server) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Do(ctx, "SENTINEL", "DEBUG", "tilt-period", TiltPeriod.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("redistest: SENTINEL DEBUG tilt-period on %s (Redis 7.0 or later): %w", s.Addr(), err)
	}
	return nil
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
// and returns its address. Its error names the Sentinels' events of the
// failover, from their logs.
func (g *Group) WaitFailover(ctx context.Context, from string) (string, error) {
	for {
		a, err := g.Master(ctx)
		if err == nil && a != from {
			return a, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("redistest: no failover from %s: %w; the Sentinels' events:\n%s", from, ctx.Err(), g.events())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// failoverEvents are the words of the Sentinels' log lines that say how a
// failover went.
var failoverEvents = []string{
	"+sdown master", "-sdown master", "+odown", "+try-failover", "+vote-for-leader", "+elected-leader",
	"-failover-abort", "Next failover delay", "+tilt", "-tilt", "+promoted-slave", "+switch-master",
}

// events returns the last 20 lines of each Sentinel's log that say how a
// failover went.
func (g *Group) events() string {
	var b strings.Builder
	for i, s := range g.Sentinels {
		log, err := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
		if err != nil {
			fmt.Fprintf(&b, "sentinel%d: %v\n", i, err)
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(log), "\n") {
			for _, e := range failoverEvents {
				if strings.Contains(l, e) {
					lines = append(lines, l)
					break
				}
			}
		}
		for _, l := range lines[max(0, len(lines)-20):] {
			fmt.Fprintf(&b, "sentinel%d: %s\n", i, l)
		}
	}
	return b.String()
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
