package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	ossignal "os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/signal"
)

// etcdMember is a member of a cluster of several: its name, the port it
// listens on for its peers, the address it tells them (its fault proxy's),
// and the cluster's members, name=URL,... An empty name runs a cluster of
// one.
type etcdMember struct {
	name, advertise, cluster string
	peerPort                 int
}

// etcdServe runs one etcd member in this process, with its data in dir, on
// 127.0.0.1:port (0: a free port), prints "endpoint ADDR", and serves until
// SIGTERM. A restart on the same dir and port keeps the data.
func etcdServe(dir string, port int, m etcdMember) error {
	client := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(m.peerPort)}
	cfg := embed.NewConfig()
	cfg.Name = "lockset"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if m.name != "" {
		cfg.Name = m.name
		cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: m.advertise}}
		cfg.InitialCluster = m.cluster
		cfg.InitialClusterToken = "lockset"
	}
	if _, err := os.Stat(dir + "/member"); err == nil {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-time.After(60 * time.Second):
		return errors.New("etcd not ready after 60s")
	}
	fmt.Printf("endpoint %s\n", e.Clients[0].Addr())
	ctx, stop := ossignal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-ctx.Done():
	case err := <-e.Err():
		return err
	}
	return nil
}

// etcdLocker takes the lock with etcdlease (side lease) or etcd's
// concurrency.Mutex (side peer), on a session of its own, made again once
// the last one ended.
type etcdLocker struct {
	cfg     clientConfig
	cli     *clientv3.Client
	mu      sync.Mutex // guards session: a process's locks acquire at once
	session *concurrency.Session
}

func newEtcdLocker(c clientConfig) (*etcdLocker, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.endpoint, ","), DialTimeout: c.ttl, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &etcdLocker{cfg: c, cli: cli}, nil
}

func (l *etcdLocker) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session != nil {
		l.session.Orphan()
	}
	l.cli.Close()
}

// sessionFor returns a live session, granting a new etcd lease within ctx
// if the last session ended.
func (l *etcdLocker) sessionFor(ctx context.Context) (*concurrency.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session != nil {
		select {
		case <-l.session.Done():
			l.session = nil
		default:
			return l.session, nil
		}
	}
	ttl := int64(l.cfg.ttl / time.Second)
	g, err := l.cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("grant a session: %w", err)
	}
	s, err := concurrency.NewSession(l.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(int(ttl)))
	if err != nil {
		return nil, err
	}
	l.session = s
	return s, nil
}

func (l *etcdLocker) acquire(ctx context.Context, lock string) (holding, error) {
	s, err := l.sessionFor(ctx)
	if err != nil {
		return nil, err
	}
	key := "/lockset/" + lock
	if l.cfg.side == "peer" {
		m := concurrency.NewMutex(s, key)
		if err := m.Lock(ctx); err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", errUnknown, err)
			}
			return nil, err
		}
		return &etcdMutexHolding{m: m, s: s}, nil
	}
	le, err := etcdlease.Lock(ctx, s, key)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	return leaseHolding{sig: le.Signal(), tok: le.Token(), unlock: le.Unlock}, nil
}

// leaseHolding is a lease of an issuer of this repository.
type leaseHolding struct {
	sig    *signal.Signal
	tok    int64
	unlock func(context.Context) error
}

func (h leaseHolding) token() int64                      { return h.tok }
func (h leaseHolding) lost() <-chan struct{}             { return h.sig.Done() }
func (h leaseHolding) held() bool                        { return h.sig.Err() == nil }
func (h leaseHolding) release(ctx context.Context) error { return h.unlock(ctx) }

// etcdMutexHolding is etcd's mutex, held the usual way: the holder acts
// while its session is not done.
type etcdMutexHolding struct {
	m *concurrency.Mutex
	s *concurrency.Session
}

func (h *etcdMutexHolding) token() int64          { return h.m.Header().Revision }
func (h *etcdMutexHolding) lost() <-chan struct{} { return h.s.Done() }
func (h *etcdMutexHolding) held() bool {
	select {
	case <-h.s.Done():
		return false
	default:
		return true
	}
}
func (h *etcdMutexHolding) release(ctx context.Context) error { return h.m.Unlock(ctx) }

// etcdServerMain is "lockset server -issuer etcd".
func etcdServerMain(args []string) error {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	dir := fs.String("dir", "", "the member's data folder")
	port := fs.Int("port", 0, "the client port; 0: a free one")
	issuer := fs.String("issuer", "etcd", "the issuer whose server to run: etcd")
	var m etcdMember
	fs.StringVar(&m.name, "name", "", "the member's name, in a cluster of several")
	fs.IntVar(&m.peerPort, "peer-port", 0, "the port the member listens on for its peers")
	fs.StringVar(&m.advertise, "advertise", "", "the address the member's peers dial: its fault proxy")
	fs.StringVar(&m.cluster, "cluster", "", "the cluster's members: name=http://ADDR,...")
	fs.Parse(args)
	if *issuer != "etcd" {
		return fmt.Errorf("server: no server process for issuer %q (etcd)", *issuer)
	}
	return etcdServe(*dir, *port, m)
}
