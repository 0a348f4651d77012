package redislease_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

// shared is the standalone primary most tests share; a test that kills,
// pauses or flushes a server starts one of its own.
var shared *redistest.Server

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if code := childMain(); code >= 0 {
		os.Exit(code)
	}
	// go-redis logs each failed dial; the tests say what matters.
	redis.SetLogger(quiet{})
	dir, err := os.MkdirTemp("", "redislease-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, err = redistest.NewServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	shared.Kill()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// short is the configuration of most tests: a 2 s TTL.
var short = redislease.Config{TTL: 2 * time.Second}

var keys atomic.Int64

// keyName returns a key no other test of the binary uses.
func keyName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), keys.Add(1))
}

// client returns a client of its own to addr, closed when the test ends.
func client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// granted is the result of a Lock and the time it returned.
type granted struct {
	l   *redislease.Lease
	err error
	at  time.Time
}

// lockAsync starts cfg.Lock in a goroutine; its result arrives on the
// channel returned.
func lockAsync(ctx context.Context, cfg redislease.Config, rdb redis.UniversalClient, key string) <-chan granted {
	c := make(chan granted, 1)
	go func() {
		l, err := cfg.Lock(ctx, rdb, key)
		c <- granted{l, err, time.Now()}
	}()
	return c
}

// mustLock locks key or fails the test; the lease is released when the
// test ends.
func mustLock(t testing.TB, cfg redislease.Config, rdb redis.UniversalClient, key string) *redislease.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := cfg.Lock(ctx, rdb, key)
	if err != nil {
		t.Fatalf("Lock(%s) = %v", key, err)
	}
	t.Cleanup(func() { l.Unlock(context.Background()) })
	return l
}

// waitLost waits for l's signal to be lost and returns its error.
func waitLost(t testing.TB, l *redislease.Lease, within time.Duration) error {
	t.Helper()
	select {
	case <-l.Signal().Done():
		return l.Signal().Err()
	case <-time.After(within):
		t.Fatalf("the lease was not lost within %v", within)
		return nil
	}
}

// notLost fails the test if l is lost within d.
func notLost(t testing.TB, l *redislease.Lease, d time.Duration) {
	t.Helper()
	select {
	case <-l.Signal().Done():
		t.Fatalf("the lease was lost: %v", l.Signal().Err())
	case <-time.After(d):
	}
}
