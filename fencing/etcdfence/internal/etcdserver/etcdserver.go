// Package etcdserver starts a real etcd member inside the process, on
// loopback ports, for the tests of etcdfence; a copy of the single member
// of etcdlease's etcdtest, as a module cannot import another's internal
// packages.
package etcdserver

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout guards against a hang; a member is ready in about a second.
const startTimeout = 30 * time.Second

// Server is an etcd member running in this process.
type Server struct {
	etcd     *embed.Etcd
	endpoint string
}

// Start starts a member that keeps its data in dir, an empty folder, and
// returns once it serves clients on 127.0.0.1 at a port the kernel picked.
func Start(dir string) (*Server, error) {
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name = "etcdserver"
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
		return nil, fmt.Errorf("etcdserver: start etcd: %w", err)
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdserver: etcd failed to start: %w", err)
	case <-timer.C:
		e.Close()
		return nil, errors.New("etcdserver: etcd not ready after " + startTimeout.String())
	}
	return &Server{etcd: e, endpoint: e.Clients[0].Addr().String()}, nil
}

// Endpoint returns the address clients dial, such as 127.0.0.1:40715.
func (s *Server) Endpoint() string { return s.endpoint }

// Close stops the member.
func (s *Server) Close() { s.etcd.Close() }
