package redisfence_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/fencing/redisfence"
	"github.com/zukhruf/lease/fencingtest"
)

// store is fencingtest's Store on a client of its own: the register is a
// string key that holds "token value".
type store struct {
	c *redis.Client
	f redisfence.Fence
}

func open(t *testing.T, addr string) fencingtest.Store {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return &store{c, redisfence.Fence{Client: c}}
}

func (s *store) Write(ctx context.Context, key string, token int64, value string) error {
	return s.f.Set(ctx, key, token, strconv.FormatInt(token, 10)+" "+value)
}

func (s *store) Advance(ctx context.Context, key string, token int64) error {
	return s.f.Advance(ctx, key, token)
}

func (s *store) Get(ctx context.Context, key string) (string, int64, error) {
	v, err := s.c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	tok, value, _ := strings.Cut(v, " ")
	n, err := strconv.ParseInt(tok, 10, 64)
	return value, n, err
}

func (s *store) Put(ctx context.Context, key, value string, token int64) error {
	return s.c.Set(ctx, key, strconv.FormatInt(token, 10)+" "+value, 0).Err()
}

func harness() fencingtest.Harness { return fencingtest.Harness{Addr: addr, Open: open} }

// TestConformance runs fencingtest on the Redis fence.
func TestConformance(t *testing.T) { fencingtest.Run(t, harness()) }

// TestNegativeControls runs fencingtest's fences built wrong on the same
// server: each must fail the suite.
func TestNegativeControls(t *testing.T) { fencingtest.RunNegativeControls(t, harness()) }
