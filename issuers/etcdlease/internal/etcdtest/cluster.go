package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/internal/faultnet"
)

// A Cluster is three etcd members running in this process, each with its
// peer traffic through a [faultnet.Proxy], so that a test can cut a member
// off from the others while its clients still reach it.
type Cluster struct {
	Members []*Member
}

// A Member is one member of a [Cluster].
type Member struct {
	etcd     *embed.Etcd
	endpoint string
	// Peer is the proxy in front of the member's peer port: every
	// connection another member opens to it goes through Peer.
	Peer  *faultnet.Proxy
	close sync.Once
}

// StartCluster starts a cluster of len(dirs) members, each keeping its data
// in one of dirs, empty folders, and returns once every member serves
// clients.
//
// Each member listens for clients on 127.0.0.1 port 0. Its peer port is a
// free loopback port picked just before the start, behind a proxy whose
// address is the peer URL the member advertises: the other members reach
// it only through that proxy. If another listener took a picked port in
// between, StartCluster empties dirs and starts again with new ports, up to
// startAttempts times.
func StartCluster(dirs []string) (*Cluster, error) {
	var err error
	for range startAttempts {
		var c *Cluster
		if c, err = startCluster(dirs); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
		for _, dir := range dirs {
			if err := os.RemoveAll(dir); err != nil {
				return nil, fmt.Errorf("etcdtest: %w", err)
			}
			if err := os.Mkdir(dir, 0o700); err != nil {
				return nil, fmt.Errorf("etcdtest: %w", err)
			}
		}
	}
	return nil, err
}

// startAttempts bounds the starts of a cluster whose picked ports were
// taken.
const startAttempts = 5

func startCluster(dirs []string) (*Cluster, error) {
	c := &Cluster{}
	var initial []string
	var cfgs []*embed.Config
	for i, dir := range dirs {
		port, err := freePort()
		if err != nil {
			c.Close()
			return nil, err
		}
		px, err := faultnet.Listen(port)
		if err != nil {
			c.Close()
			return nil, err
		}
		m := &Member{Peer: px}
		c.Members = append(c.Members, m)
		name := fmt.Sprintf("m%d", i)
		cfg := embed.NewConfig()
		cfg.Name = name
		cfg.Dir = dir
		client := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
		cfg.ListenClientUrls = []url.URL{client}
		cfg.AdvertiseClientUrls = []url.URL{client}
		cfg.ListenPeerUrls = []url.URL{{Scheme: "http", Host: port}}
		cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: px.Addr()}}
		cfg.InitialClusterToken = "etcdtest-cluster"
		cfg.EnableGRPCGateway = false
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		initial = append(initial, name+"=http://"+px.Addr())
		cfgs = append(cfgs, cfg)
	}
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("etcdtest: start member %s: %w", cfg.Name, err)
		}
		c.Members[i].etcd = e
		c.Members[i].endpoint = e.Clients[0].Addr().String()
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	for _, m := range c.Members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			c.Close()
			return nil, fmt.Errorf("etcdtest: member failed to start: %w", err)
		case <-timer.C:
			c.Close()
			return nil, errors.New("etcdtest: cluster not ready after " + startTimeout.String())
		}
	}
	return c, nil
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("etcdtest: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// Endpoint returns the address the member's clients dial.
func (m *Member) Endpoint() string { return m.endpoint }

// Client returns a new client of the member alone, which logs nothing. The
// caller closes it.
func (m *Member) Client() (*clientv3.Client, error) { return newClient(m.endpoint) }

// IsLeader reports whether the member is the raft leader now.
func (m *Member) IsLeader() bool {
	return m.etcd.Server.Leader() == m.etcd.Server.MemberID()
}

// Leader returns the index of the member that is the leader now and that
// every other running member follows, waiting up to startTimeout for one.
func (c *Cluster) Leader() (int, error) {
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		lead := c.Members[0].etcd.Server.Leader()
		agree := lead != 0
		idx := -1
		for i, m := range c.Members {
			if m.etcd.Server.Leader() != lead {
				agree = false
			}
			if m.etcd.Server.MemberID() == lead {
				idx = i
			}
		}
		if agree && idx >= 0 {
			return idx, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1, errors.New("etcdtest: no leader that every member follows after " + startTimeout.String())
}

// Isolate cuts member i off from the others, both ways, while its clients
// still reach it: every byte of the connections the others opened to it is
// dropped at its peer proxy, and every member drops the raft messages
// between i and the others.
//
// The proxy alone cannot isolate a member: a member also dials the others,
// and etcd's raft transport carries the messages from a peer over the
// stream the receiving member dialed, through the peer's proxy, which the
// third member shares. Dropping the raft messages at both ends covers
// those. What is left is the HTTP requests member i itself sends to the
// leader it last knew, which etcd uses to forward its clients' lease
// renewals: they pass until member i stops believing in that leader, an
// election timeout after the cut, and each of them really renews the lease.
func (c *Cluster) Isolate(i int) {
	m := c.Members[i]
	m.Peer.Drop(faultnet.Both)
	for j, o := range c.Members {
		if j == i {
			continue
		}
		m.etcd.Server.CutPeer(o.etcd.Server.MemberID())
		o.etcd.Server.CutPeer(m.etcd.Server.MemberID())
	}
}

// Heal undoes [Cluster.Isolate] of member i, and cuts the connections the
// drop broke so that they are opened again.
func (c *Cluster) Heal(i int) {
	m := c.Members[i]
	for j, o := range c.Members {
		if j == i {
			continue
		}
		m.etcd.Server.MendPeer(o.etcd.Server.MemberID())
		o.etcd.Server.MendPeer(m.etcd.Server.MemberID())
	}
	m.Peer.Heal()
	m.Peer.Cut()
}

// Crash stops member i at once, without the leadership transfer or the
// wait for open requests of a clean stop, and resets the connections of its
// peers to it; the rest of the stop runs in the background until
// [Cluster.Close].
func (c *Cluster) Crash(i int) {
	m := c.Members[i]
	m.etcd.Server.HardStop()
	m.Peer.Close()
}

// Close stops every member and its proxy, each member in its own
// goroutine, and waits for them. Successive calls do nothing more.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.close.Do(func() {
				if m.etcd != nil {
					m.etcd.Close()
				}
				m.Peer.Close()
			})
		}()
	}
	wg.Wait()
}
