package kubetest

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"
)

// etcdServer is the etcd member under the apiserver, run inside this
// process, on ports picked at the first start and kept across restarts.
type etcdServer struct {
	dir                  string
	clientAddr, peerAddr string

	mu sync.Mutex
	e  *embed.Etcd // nil while stopped
}

// startFresh picks two free ports and starts etcd on them with an empty
// data folder, trying again with other ports if one was taken meanwhile.
func (s *etcdServer) startFresh() error {
	for try := 1; ; try++ {
		var err error
		if s.clientAddr, err = freeAddr(); err != nil {
			return err
		}
		if s.peerAddr, err = freeAddr(); err != nil {
			return err
		}
		err = s.start()
		if err == nil || try == startAttempts || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("kubetest: %w", err)
		}
	}
}

func freeAddr() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// start starts etcd on its ports and data and returns once it serves.
// quietGRPC keeps gRPC's own log, which etcd's clients inside this process
// write to at every failed dial while etcd is stopped, out of test output.
var quietGRPC sync.Once

func (s *etcdServer) start() error {
	quietGRPC.Do(func() { grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard)) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		return errors.New("kubetest: etcd is running")
	}
	client := url.URL{Scheme: "http", Host: s.clientAddr}
	peer := url.URL{Scheme: "http", Host: s.peerAddr}
	cfg := embed.NewConfig()
	cfg.Name = "kubetest"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.EnableGRPCGateway = false
	// A test's data need not survive a crash of the machine.
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("kubetest: start etcd: %w", err)
	}
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("kubetest: etcd failed to start: %w", err)
	case <-timer.C:
		e.Close()
		return errors.New("kubetest: etcd not ready after " + readyTimeout.String())
	}
	s.e = e
	return nil
}

// stop stops etcd if it runs; see [Server.StopEtcd].
func (s *etcdServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}
