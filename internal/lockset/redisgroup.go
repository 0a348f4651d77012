package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/internal/lockset/check"
)

// Redis's sentinel and cluster mixes run the server as a group of a
// primary, two replicas and three Sentinels, or as a Cluster of three
// primaries, each with a replica: the command lockset-redis of the
// redislease module (by its internal package redistest), built by make
// into the file LOCKSET_REDIS names. The clients learn which it is from
// LOCKSET_REDIS_GROUP ("sentinel MASTER ADDR,...", the Sentinels', or
// "cluster"), and dial each server through their own proxy, by -servers
// and -endpoint.
const (
	redisGroupServerEnv = "LOCKSET_REDIS"
	redisGroupEnv       = "LOCKSET_REDIS_GROUP"
)

// The kinds of fault of the sentinel and cluster mixes: a primary (the
// Sentinels' one, or a Cluster's at random) stopped (a stop past the
// Sentinels' down-after or the Cluster's node timeout, 2.5 s, is failed
// over, and the old primary resumes after the failover); a primary
// killed, and started again, empty, once another serves in its place (or,
// if none does within 25 s, started anyway: an erasure of its keys,
// recorded as kill-server-wipe); a Sentinel group's replica's replication
// link made silent.
const (
	PausePrimary   = "pause-primary"
	KillPrimary    = "kill-primary"
	CutReplication = "cut-replication"
)

// redisGroup is the running lockset-redis.
type redisGroup struct {
	cluster   bool
	Master    string   `json:"master"`
	Sentinels []string `json:"sentinels"`
	Servers   []string `json:"servers"`

	mu  sync.Mutex // one fault's line and its answer at a time
	in  io.WriteCloser
	out *bufio.Scanner
}

// startRedisGroup starts lockset-redis, a Cluster if cluster, and returns
// the servers' addresses, joined by commas.
func (r *runner) startRedisGroup(cluster bool) (string, error) {
	bin := os.Getenv(redisGroupServerEnv)
	if bin == "" {
		return "", fmt.Errorf("%s is not set: build issuers/redislease/internal/redistest/cmd/lockset-redis and name it there (make lockset ISSUER=redis MIX=sentinel does)", redisGroupServerEnv)
	}
	// The runner's own questions to a stopped or killed server fail, as
	// they should: go-redis need not log each.
	redis.SetLogger(quiet{})
	kind := "sentinel"
	if cluster {
		kind = "cluster"
	}
	cmd := exec.Command(bin, "-kind", kind, "-dir", filepath.Join(r.dir, "server"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	p, stdout, err := startPiped("server", cmd)
	if err != nil {
		return "", err
	}
	go func() { cmd.Wait(); close(p.done) }()
	g := &redisGroup{cluster: cluster, in: stdin, out: bufio.NewScanner(stdout)}
	if !g.out.Scan() {
		p.signal(syscall.SIGKILL)
		return "", errors.New("lockset-redis exited before its servers were ready")
	}
	if err := json.Unmarshal(g.out.Bytes(), g); err != nil || len(g.Servers) == 0 {
		p.signal(syscall.SIGKILL)
		return "", fmt.Errorf("lockset-redis said %q", g.out.Text())
	}
	// The clients inherit the environment.
	if cluster {
		os.Setenv(redisGroupEnv, "cluster")
	} else {
		os.Setenv(redisGroupEnv, "sentinel "+g.Master+" "+strings.Join(g.Sentinels, ","))
	}
	r.mu.Lock()
	r.server, r.redisGroup = p, g
	r.mu.Unlock()
	return strings.Join(g.Servers, ","), nil
}

// do asks lockset-redis for one fault.
func (g *redisGroup) do(op, addr string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := fmt.Fprintf(g.in, "%s %s\n", op, addr); err != nil {
		return err
	}
	if !g.out.Scan() {
		return errors.New("lockset-redis exited")
	}
	if msg, failed := strings.CutPrefix(g.out.Text(), "error: "); failed {
		return errors.New(msg)
	}
	return nil
}

// primaries returns the primaries' addresses: the Sentinels' one, as the
// first Sentinel that answers names it; a Cluster's that serve slots, as
// the first node that answers lists them. Each is asked directly, past
// the clients' proxies.
func (g *redisGroup) primaries() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var last error
	if g.cluster {
		for _, s := range g.Servers {
			nodes, err := clusterNodes(ctx, s)
			if err != nil {
				last = err
				continue
			}
			var ps []string
			for addr, n := range nodes {
				if n.master && !n.failed && n.slots {
					ps = append(ps, addr)
				}
			}
			slices.Sort(ps)
			return ps, nil
		}
		return nil, last
	}
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s, DialTimeout: time.Second, ReadTimeout: time.Second})
		a, err := sc.GetMasterAddrByName(ctx, g.Master).Result()
		sc.Close()
		if err == nil {
			return []string{net.JoinHostPort(a[0], a[1])}, nil
		}
		last = err
	}
	return nil, last
}

// clusterNode is a node as CLUSTER NODES lists it.
type clusterNode struct{ master, failed, slots bool }

// clusterNodes returns the nodes the Cluster node at addr knows, by
// address.
func clusterNodes(ctx context.Context, addr string) (map[string]clusterNode, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	text, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	nodes := map[string]clusterNode{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		// id ip:port@cport[,hostname] flags master ping pong epoch link slot...
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		a, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		nodes[a] = clusterNode{master: slices.Contains(flags, "master"), failed: slices.Contains(flags, "fail") || slices.Contains(flags, "fail?"), slots: len(f) > 8}
	}
	return nodes, nil
}

// waitFailover waits until another server serves in from's place, for up
// to 25 s (redistest.FailoverWithin), and reports whether one did: the
// Sentinels name another primary, or a Cluster node other than from lists
// from with no slots.
func (g *redisGroup) waitFailover(from string) bool {
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		if g.cluster {
			for _, s := range g.Servers {
				if s == from {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				nodes, err := clusterNodes(ctx, s)
				cancel()
				if err == nil && !nodes[from].slots {
					return true
				}
			}
		} else if ps, err := g.primaries(); err == nil && ps[0] != from {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// redisGroupFault makes a fault of kind to the servers, choice picking
// its target, and returns the target's address, its heal, and the kind
// it turned out to be.
func (r *runner) redisGroupFault(kind string, choice uint64) (string, func() string, error) {
	g := r.redisGroup
	switch kind {
	case PausePrimary, KillPrimary:
		ps, err := g.primaries()
		if err != nil {
			return "", nil, err
		}
		if len(ps) == 0 {
			return "", nil, errors.New("no primary serves")
		}
		addr := ps[choice%uint64(len(ps))]
		if kind == PausePrimary {
			if err := g.do("pause", addr); err != nil {
				return "", nil, err
			}
			return addr, func() string {
				if err := g.do("resume", addr); err != nil {
					fmt.Println("lockset: resume", addr+":", err)
				}
				return kind
			}, nil
		}
		if err := g.do("kill", addr); err != nil {
			return "", nil, err
		}
		return addr, func() string {
			healed := kind
			if !g.waitFailover(addr) {
				fmt.Println("lockset: no failover from", addr, "within 25 s: it starts again empty, erasing its keys")
				healed = check.KillServerWipe
			}
			if err := g.do("start", addr); err != nil {
				fmt.Println("lockset: start", addr+":", err)
			}
			return healed
		}, nil
	case CutReplication:
		addr := g.Servers[1+choice%uint64(len(g.Servers)-1)]
		if err := g.do("cut", addr); err != nil {
			return "", nil, err
		}
		return addr, func() string {
			if err := g.do("heal", addr); err != nil {
				fmt.Println("lockset: heal", addr+":", err)
			}
			return kind
		}, nil
	}
	panic("lockset: redisGroupFault called with kind " + kind)
}

// routeDialer returns a dialer that dials each address of servers through
// the proxy at the same index of proxies, and any other address (a
// Sentinel's) directly.
func routeDialer(servers, proxies []string, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	route := map[string]string{}
	for i, s := range servers {
		if i < len(proxies) {
			route[s] = proxies[i]
		}
	}
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p, ok := route[addr]; ok {
			addr = p
		}
		return d.DialContext(ctx, network, addr)
	}
}
