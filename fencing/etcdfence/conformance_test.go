package etcdfence_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/fencing/etcdfence"
	"github.com/zukhruf/lease/fencingtest"
)

func newClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// store is fencingtest's Store on a client of its own: the register is a
// key that holds "token value".
type store struct {
	c *clientv3.Client
	f etcdfence.Fence
}

func open(t *testing.T, addr string) fencingtest.Store {
	c := newClient(t, addr)
	return &store{c, etcdfence.Fence{KV: c}}
}

func (s *store) Write(ctx context.Context, key string, token int64, value string) error {
	return s.f.Put(ctx, key, token, strconv.FormatInt(token, 10)+" "+value)
}

func (s *store) Advance(ctx context.Context, key string, token int64) error {
	return s.f.Advance(ctx, key, token)
}

func (s *store) Get(ctx context.Context, key string) (string, int64, error) {
	resp, err := s.c.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return "", 0, err
	}
	tok, value, _ := strings.Cut(string(resp.Kvs[0].Value), " ")
	n, err := strconv.ParseInt(tok, 10, 64)
	return value, n, err
}

func (s *store) Put(ctx context.Context, key, value string, token int64) error {
	_, err := s.c.Put(ctx, key, strconv.FormatInt(token, 10)+" "+value)
	return err
}

func harness() fencingtest.Harness { return fencingtest.Harness{Addr: addr, Open: open} }

// TestConformance runs fencingtest on the etcd fence.
func TestConformance(t *testing.T) { fencingtest.Run(t, harness()) }

// TestNegativeControls runs fencingtest's fences built wrong on the same
// member: each must fail the suite.
func TestNegativeControls(t *testing.T) { fencingtest.RunNegativeControls(t, harness()) }
