package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
)

// TestServer: a single server takes a bucket with per-key TTLs, comes
// back with its data after a kill, and answers again after a pause.
func TestServer(t *testing.T) {
	s := natstest.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := natstest.Client(t, s.URL(natstest.App), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	kv, err := natstest.Bucket(ctx, nc, "b", 1)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "k")
	if err != nil || e.Revision() != rev {
		t.Fatalf("after a restart: Get() = %v, %v, want revision %d", e, err, rev)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "k"); err != nil {
		t.Fatalf("after a pause: Get() = %v", err)
	}
}

// TestCluster: a cluster of three holds a bucket at R3 whose stream
// leader steps down and is elected again, and whose meta leader steps down.
func TestCluster(t *testing.T) {
	c := natstest.StartClusterT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc := natstest.Client(t, c.URL(natstest.App), nats.MaxReconnects(-1))
	if _, err := natstest.Bucket(ctx, nc, "b", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitStreamLeader(ctx, nc, "KV_b", ""); err != nil {
		t.Fatal(err)
	}
	if err := natstest.StepDownStream(ctx, nc, "KV_b"); err != nil {
		t.Fatal(err)
	}
	// The stream elects a leader again; under load the one that stepped
	// down may win the next election, so any leader will do.
	if _, err := c.WaitStreamLeader(ctx, nc, "KV_b", ""); err != nil {
		t.Fatal(err)
	}
	if err := c.StepDownMeta(ctx); err != nil {
		t.Fatal(err)
	}
}
