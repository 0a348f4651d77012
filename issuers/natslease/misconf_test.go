package natslease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
)

// TestMistakes: each mistake fails the first Lock at once, long before its
// context ends, with an error that names the call that found it.
func TestMistakes(t *testing.T) {
	url := shared.URL(natstest.App)
	// A bucket without per-key TTLs, and one that expires keys itself.
	js, err := jetstream.New(client(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "nottl"}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "shortage", TTL: 5 * time.Second, LimitMarkerTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	closed := client(t, url)
	closed.Close()
	for _, c := range []struct {
		name string
		nc   func() *nats.Conn
		cfg  natslease.Config
		key  string
		want string // in the error's text
	}{
		{"no JetStream in the account", func() *nats.Conn { return client(t, shared.URL(natstest.NoJS)) }, short, "k", "js.KeyValue(\"leases\")"},
		{"a bucket that does not exist", func() *nats.Conn { return client(t, url) }, natslease.Config{Bucket: "nosuch", TTL: 2 * time.Second}, "k", "bucket not found"},
		{"a bucket without per-key TTLs", func() *nats.Conn { return client(t, url) }, natslease.Config{Bucket: "nottl", TTL: 2 * time.Second}, "k", "does not allow per-key TTLs"},
		{"a bucket whose TTL is shorter", func() *nats.Conn { return client(t, url) }, natslease.Config{Bucket: "shortage", TTL: 10 * time.Second}, "k", "expires every key after 5s"},
		{"no permission to publish to the key", func() *nats.Conn { return client(t, shared.URL(natstest.RO)) }, short, "k", "kv.Create: nats: permissions violation"},
		{"wrong credentials", func() *nats.Conn {
			nc, err := nats.Connect(url) // the session dials with the options' user, changed below
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			nc.Opts.Password = "wrong"
			nc.Opts.Servers = []string{"nats://app:wrong@" + shared.Addr()}
			nc.Opts.Url = "nats://app:wrong@" + shared.Addr()
			return nc
		}, short, "k", "connect: nats: Authorization Violation"},
		{"a closed connection", func() *nats.Conn { return closed }, short, "k", "connection closed"},
		{"a nil connection", func() *nats.Conn { return nil }, short, "k", "nil *nats.Conn"},
		{"the empty key", func() *nats.Conn { return client(t, url) }, short, "", "the empty key"},
		{"a key the bucket refuses", func() *nats.Conn { return client(t, url) }, short, "a key", "which a KV bucket refuses"},
		{"a TTL of a fraction of a second", func() *nats.Conn { return client(t, url) }, natslease.Config{TTL: 2500 * time.Millisecond}, "k", "not a whole number of seconds"},
		{"a margin of half the TTL", func() *nats.Conn { return client(t, url) }, natslease.Config{TTL: 2 * time.Second, Margin: time.Second}, "k", "half the TTL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			l, err := c.cfg.Lock(ctx, c.nc(), c.key)
			if err == nil {
				l.Unlock(ctx)
				t.Fatalf("Lock = a lease, want an error naming %q", c.want)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock waited out its context: %v", err)
			}
			t.Logf("Lock = %v", err)
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "natslease: lock ") {
				t.Errorf("Lock = %v, want an error from natslease naming %q", err, c.want)
			}
		})
	}
}

// TestTryLockHeld: a TryLock of a held key is refused at once with
// lease.ErrHeld, and writes nothing.
func TestTryLockHeld(t *testing.T) {
	url := shared.URL(natstest.App)
	key := keyName(t)
	a := mustLock(t, short, client(t, url), key)
	_, err := natslease.NewLocker(client(t, url), short).TryLock(t.Context(), key)
	if !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("TryLock of a held key = %v, want lease.ErrHeld", err)
	}
	notLost(t, a, 100*time.Millisecond)
}

// TestNilContext: a nil context panics naming the package and the call.
func TestNilContext(t *testing.T) {
	nc := client(t, shared.URL(natstest.App))
	for _, c := range []struct {
		name string
		f    func()
		want string
	}{
		//lint:ignore SA1012 the nil context is what is tested
		{"Lock", func() { natslease.Lock(nil, nc, "k") }, "natslease: Lock called with a nil context"},
		//lint:ignore SA1012 the nil context is what is tested
		{"TryLock", func() { natslease.NewLocker(nc, short).TryLock(nil, "k") }, "natslease: TryLock called with a nil context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != c.want {
					t.Errorf("panic = %v, want %q", r, c.want)
				}
			}()
			c.f()
		})
	}
}
