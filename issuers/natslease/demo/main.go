// Command demo shows two holders contending for one key of a NATS
// JetStream KV bucket on a real nats-server: an operator deletes the key
// under the first, which is told at once with the cause; the second takes
// over with a larger fencing token. It prints the timeline.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "natslease-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natstest.Start(dir)
	if err != nil {
		return err
	}
	defer srv.Close()
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%7.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ops, err := nats.Connect(srv.URL(natstest.App))
	if err != nil {
		return err
	}
	defer ops.Close()
	js, err := jetstream.New(ops)
	if err != nil {
		return err
	}
	kv, err := js.CreateKeyValue(ctx, natslease.BucketConfig(natslease.DefaultBucket, 1))
	if err != nil {
		return err
	}
	say("nats-server up; bucket %q with per-key TTLs", natslease.DefaultBucket)

	cfg := natslease.Config{TTL: 2 * time.Second}
	const key = "reports.nightly"
	first, err := nats.Connect(srv.URL(natstest.App))
	if err != nil {
		return err
	}
	defer first.Close()
	second, err := nats.Connect(srv.URL(natstest.App))
	if err != nil {
		return err
	}
	defer second.Close()

	a, err := cfg.Lock(ctx, first, key)
	if err != nil {
		return err
	}
	say("holder 1 holds %q, token %d", key, a.Token())
	type result struct {
		l   *natslease.Lease
		err error
	}
	granted := make(chan result, 1)
	go func() {
		l, err := cfg.Lock(ctx, second, key)
		granted <- result{l, err}
	}()
	say("holder 2 waits for %q", key)
	time.Sleep(3 * cfg.TTL) // holder 1 renews through three TTLs
	say("holder 1 still holds it after %v of renewals: Err() = %v", 3*cfg.TTL, a.Signal().Err())

	if err := kv.Delete(ctx, key); err != nil {
		return err
	}
	say("an operator deletes %q", key)
	<-a.Signal().Done()
	say("holder 1 is told: %v", a.Signal().Err())
	if !errors.Is(a.Signal().Err(), natslease.ErrDeleted) {
		return fmt.Errorf("holder 1 lost with %v, want ErrDeleted", a.Signal().Err())
	}
	r := <-granted
	if r.err != nil {
		return r.err
	}
	say("holder 2 holds %q, token %d (holder 1's was %d)", key, r.l.Token(), a.Token())
	a.Unlock(ctx)
	if err := r.l.Unlock(ctx); err != nil {
		return err
	}
	say("holder 2 released it; its signal was never lost: Err() = %v", r.l.Signal().Err())
	return nil
}
