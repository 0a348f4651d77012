package natslease_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
)

// shared is the single server most tests share, with the bucket "leases"
// at R1; a test that kills, pauses or restarts a server starts one of its
// own.
var shared *natstest.Server

// lossWithin bounds the wait for a loss the tests cause: the push takes
// milliseconds, and 5 s keeps a loaded machine under the race detector
// from failing a test for its slowness.
const lossWithin = 5 * time.Second

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "natslease-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, err = natstest.Start(dir)
	if err == nil {
		err = createBucket(shared.URL(natstest.App), natslease.DefaultBucket, 1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	shared.Close()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// createBucket creates the bucket name at replicas copies, as
// natslease.BucketConfig says.
func createBucket(url, name string, replicas int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = js.CreateKeyValue(ctx, natslease.BucketConfig(name, replicas))
	return err
}

// short is the configuration of most tests: a 2 s TTL.
var short = natslease.Config{TTL: 2 * time.Second}

var keys atomic.Int64

// keyName returns a key no other test of the binary uses.
func keyName(t testing.TB) string {
	r := strings.NewReplacer("/", "-", "#", "-", " ", "-", "(", "", ")", "", ",", "", "'", "", "′", "", ":", "")
	return fmt.Sprintf("%s-%d", r.Replace(t.Name()), keys.Add(1))
}

// client returns a connection of its own to url, closed when the test
// ends; it reconnects for ever.
func client(t testing.TB, url string) *nats.Conn {
	t.Helper()
	return natstest.Client(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), quiet)
}

// quiet is the tests' clients' handler of asynchronous errors: a reset
// during a fault is the fault, and nats.go's default handler would print
// each one.
var quiet = nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})

// bucket returns the KV bucket name through nc.
func bucket(t testing.TB, nc *nats.Conn, name string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// granted is the result of a Lock and the time it returned.
type granted struct {
	l   *natslease.Lease
	err error
	at  time.Time
}

// lockAsync starts cfg.Lock in a goroutine; its result arrives on the
// channel returned.
func lockAsync(ctx context.Context, cfg natslease.Config, nc *nats.Conn, key string) <-chan granted {
	c := make(chan granted, 1)
	go func() {
		l, err := cfg.Lock(ctx, nc, key)
		c <- granted{l, err, time.Now()}
	}()
	return c
}

// mustLock locks key or fails the test; the lease is released when the
// test ends.
func mustLock(t testing.TB, cfg natslease.Config, nc *nats.Conn, key string) *natslease.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := cfg.Lock(ctx, nc, key)
	if err != nil {
		t.Fatalf("Lock(%s) = %v", key, err)
	}
	t.Cleanup(func() { l.Unlock(context.Background()) })
	return l
}

// waitLost waits for l's signal to be lost and returns its error.
func waitLost(t testing.TB, l *natslease.Lease, within time.Duration) error {
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
func notLost(t testing.TB, l *natslease.Lease, d time.Duration) {
	t.Helper()
	select {
	case <-l.Signal().Done():
		t.Fatalf("the lease was lost: %v", l.Signal().Err())
	case <-time.After(d):
	}
}
