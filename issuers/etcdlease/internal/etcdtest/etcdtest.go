// Package etcdtest starts real etcd servers inside the process, on loopback
// ports, for the tests and the demo of package etcdlease: a single member
// ([Start]) or a cluster of members whose peer traffic goes through fault
// proxies ([StartCluster]).
package etcdtest

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout bounds the wait for a new member to elect itself and serve; it
// guards against a hang, it is not a measure: a member is ready in about a
// second.
const startTimeout = 30 * time.Second

// Server is an etcd member running in this process.
type Server struct {
	etcd     *embed.Etcd
	endpoint string
	close    sync.Once
}

// Start starts a member that keeps its data in dir, an empty folder, and
// returns once it serves clients.
//
// The member listens on 127.0.0.1 port 0 for clients and peers, so the
// kernel picks free ports and two servers, or two test binaries, never
// collide; [Server.Endpoint] tells the port it got. The member advertises
// those unresolved URLs, which no one dials: it has no peers, and clients
// dial the endpoint.
func Start(dir string) (*Server, error) {
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.EnableGRPCGateway = false
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: start etcd: %w", err)
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdtest: etcd failed to start: %w", err)
	case <-timer.C:
		e.Close()
		return nil, errors.New("etcdtest: etcd not ready after " + startTimeout.String())
	}
	return &Server{etcd: e, endpoint: e.Clients[0].Addr().String()}, nil
}

// Endpoint returns the address clients dial, such as 127.0.0.1:40715.
func (s *Server) Endpoint() string { return s.endpoint }

// Client returns a new client of the server that logs nothing. The caller
// closes it.
func (s *Server) Client() (*clientv3.Client, error) { return newClient(s.endpoint) }

// newClient returns a client of endpoint alone that logs nothing.
func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// Close stops the member: it stops accepting connections at once, then waits
// for open streams to end, up to etcd's request timeout, before cutting them.
// Successive calls do nothing.
func (s *Server) Close() {
	s.close.Do(s.etcd.Close)
}
