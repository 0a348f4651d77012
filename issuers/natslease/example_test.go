package natslease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
)

// The leases of a Locker share their client's session; TryLock of a held
// key is refused with lease.ErrHeld.
func ExampleNewLocker() {
	ctx := context.Background()
	nc, err := nats.Connect(shared.URL(natstest.App))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	locker := natslease.NewLocker(nc, natslease.Config{TTL: 2 * time.Second})
	l, err := locker.Lock(ctx, "example.orders")
	if err != nil {
		panic(err)
	}
	_, err = locker.TryLock(ctx, "example.orders")
	fmt.Println("TryLock of a held key:", errors.Is(err, lease.ErrHeld))
	fmt.Println("held:", l.Signal().Err() == nil)
	if err := l.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("after Unlock:", l.Signal().Err())
	// Output:
	// TryLock of a held key: true
	// held: true
	// after Unlock: <nil>
}

// An operator's delete of the key loses the holder at once, with the
// cause.
func ExampleConfig_Lock() {
	ctx := context.Background()
	nc, err := nats.Connect(shared.URL(natstest.App))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	l, err := natslease.Config{TTL: 2 * time.Second}.Lock(ctx, nc, "example.reports")
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, natslease.DefaultBucket)
	if err != nil {
		panic(err)
	}
	if err := kv.Delete(ctx, "example.reports"); err != nil {
		panic(err)
	}
	<-l.Signal().Done()
	fmt.Println(errors.Is(l.Signal().Err(), natslease.ErrDeleted))
	// Output:
	// true
}

// Health reads the lease's deadline without the network; the Config's
// Observer is told of the grant and the release, after the fact.
func ExampleLease_Health() {
	ctx := context.Background()
	nc, err := nats.Connect(shared.URL(natstest.App))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	seen := map[health.Kind]bool{}
	o := health.ObserverFunc(func(e health.Event) {
		mu.Lock()
		seen[e.Kind] = true
		mu.Unlock()
	})
	l, err := natslease.Config{TTL: 2 * time.Second, Observer: o}.Lock(ctx, nc, "example.health")
	if err != nil {
		panic(err)
	}
	h := l.Health()
	fmt.Println("deadline after the last confirmed write:", h.Deadline.Sub(h.Renewed))
	if err := l.Unlock(ctx); err != nil {
		panic(err)
	}
	mu.Lock()
	fmt.Println("granted:", seen[health.Granted], "released:", seen[health.Released])
	mu.Unlock()
	// Output:
	// deadline after the last confirmed write: 1.8s
	// granted: true released: true
}

// BucketConfig is the bucket the leases need: per-key TTLs.
func ExampleBucketConfig() {
	cfg := natslease.BucketConfig("leases", 3)
	fmt.Println(cfg.Bucket, cfg.Replicas, cfg.LimitMarkerTTL > 0)
	// Output:
	// leases 3 true
}
