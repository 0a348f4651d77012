package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeTimeout is the cluster-node-timeout of a [Cluster]: how long its
// nodes wait for a silent primary before its replica takes over. Like
// [DownAfter], longer than the 2 s TTL of the fault trials.
const NodeTimeout = 2500 * time.Millisecond

// A Cluster is a Redis Cluster of three primaries, each with one replica,
// the 16384 slots split evenly among the primaries.
type Cluster struct {
	Nodes   []*Server // the primaries first, then their replicas, in order
	closers []func()
}

// StartCluster starts a Cluster, waits until every node reports it ok and
// every replica is in sync, and stops it when tb ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := NewCluster(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewCluster starts a Cluster as StartCluster does, in folders under dir;
// the caller stops it with Close.
func NewCluster(dir string) (c *Cluster, err error) {
	c = &Cluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := range 6 {
		d := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return c, err
		}
		s, err := NewServer(d, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(d, "nodes.conf"),
			"--cluster-node-timeout", fmt.Sprint(NodeTimeout.Milliseconds()))
		if err != nil {
			return c, err
		}
		c.closers = append(c.closers, s.Close)
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := make([]*redis.Client, len(c.Nodes))
	for i, s := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer clients[i].Close()
	}
	for i := 1; i < len(c.Nodes); i++ {
		if err := clients[i].ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(c.Nodes[0].Port)).Err(); err != nil {
			return c, fmt.Errorf("redistest: CLUSTER MEET: %w", err)
		}
	}
	for i := range 3 {
		lo, hi := i*16384/3, (i+1)*16384/3-1
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return c, fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE: %w", err)
		}
	}
	ids := make([]string, 3)
	for i := range 3 {
		if ids[i], err = clients[i].ClusterMyID(ctx).Result(); err != nil {
			return c, err
		}
	}
	// A replica can replicate a primary only once it knows it.
	for i := 3; i < 6; i++ {
		for {
			err := clients[i].Do(ctx, "CLUSTER", "REPLICATE", ids[i-3]).Err()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return c, fmt.Errorf("redistest: CLUSTER REPLICATE: %w", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for {
		ok := true
		for i, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
				ok = false
			}
			if i < 3 {
				rep, err := cl.Info(ctx, "replication").Result()
				if err != nil || !strings.Contains(rep, "connected_slaves:1") || !strings.Contains(rep, "state=online") {
					ok = false
				}
			}
		}
		if ok {
			return c, nil
		}
		if ctx.Err() != nil {
			return c, fmt.Errorf("redistest: the Cluster was not ok within 60 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Close stops every node.
func (c *Cluster) Close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.Nodes {
		a = append(a, s.Addr())
	}
	return a
}

// Client returns a Cluster client of its own, closed when tb ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// Node returns the node at addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// MasterOf returns the address of the primary that serves key's slot, as
// the node at from reports it.
func MasterOf(ctx context.Context, from, key string) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: from})
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Health == "online" {
					return fmt.Sprintf("%s:%d", n.IP, n.Port), nil
				}
			}
		}
	}
	return "", fmt.Errorf("redistest: no node serves slot %d", slot)
}
