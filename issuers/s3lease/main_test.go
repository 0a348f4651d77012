package s3lease_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"go.uber.org/goleak"

	"github.com/zukhruf/lease/issuers/s3lease"
	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"
)

// shared is the versitygw server most tests share; a test that kills or
// pauses a server starts one of its own.
var shared *s3test.Server

// bucket is the bucket of the lock objects on every server of the tests.
const bucket = "locks"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "s3lease-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, err = s3test.NewServer(dir)
	if err == nil {
		err = shared.Bucket(bucket)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	shared.Kill()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// startServer starts a server of the test's own with the bucket.
func startServer(t *testing.T) *s3test.Server {
	t.Helper()
	s := s3test.Start(t)
	if err := s.Bucket(bucket); err != nil {
		t.Fatal(err)
	}
	return s
}

// short is the configuration of most tests: a 2 s TTL, so a deadline of
// 1.7 s after the last confirmed write, renewed every 500 ms.
var short = s3lease.Config{Bucket: bucket, TTL: 2 * time.Second}

var keys atomic.Int64

// keyName returns a key no other test of the binary uses.
func keyName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), keys.Add(1))
}

// client returns a client of its own to addr.
func client(t testing.TB, addr string) *minio.Client {
	t.Helper()
	return s3test.Client(addr)
}

// granted is the result of a Lock and the time it returned.
type granted struct {
	l   *s3lease.Lease
	err error
	at  time.Time
}

// lockAsync starts cfg.Lock in a goroutine; its result arrives on the
// channel returned.
func lockAsync(ctx context.Context, cfg s3lease.Config, c *minio.Client, key string) <-chan granted {
	ch := make(chan granted, 1)
	go func() {
		l, err := cfg.Lock(ctx, c, key)
		ch <- granted{l, err, time.Now()}
	}()
	return ch
}

// mustLock locks key or fails the test; the lease is released when the
// test ends.
func mustLock(t testing.TB, cfg s3lease.Config, c *minio.Client, key string) *s3lease.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := cfg.Lock(ctx, c, key)
	if err != nil {
		t.Fatalf("Lock(%s) = %v", key, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.Unlock(ctx) // a link a test left silent would hold it forever
	})
	return l
}

// waitLost waits for l's signal to be lost and returns its error.
func waitLost(t testing.TB, l *s3lease.Lease, within time.Duration) error {
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
func notLost(t testing.TB, l *s3lease.Lease, d time.Duration) {
	t.Helper()
	select {
	case <-l.Signal().Done():
		t.Fatalf("the lease was lost: %v", l.Signal().Err())
	case <-time.After(d):
	}
}
