package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// An isolated member loses its leader while its client still reaches it,
// and the others go on serving; healed, it rejoins.
func TestClusterIsolate(t *testing.T) {
	c, err := etcdtest.StartCluster([]string{t.TempDir(), t.TempDir(), t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lead, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	iso := (lead + 1) % 3
	other := (lead + 2) % 3
	cli, err := c.Members[iso].Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ocli, err := c.Members[other].Client()
	if err != nil {
		t.Fatal(err)
	}
	defer ocli.Close()

	c.Isolate(iso)
	// A linearizable read needs the leader: the isolated member cannot
	// serve it, the majority can.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	_, err = cli.Get(ctx, "k")
	cancel()
	if err == nil {
		t.Error("a linearizable read on the isolated member succeeded")
	}
	if _, err := ocli.Put(t.Context(), "k", "v"); err != nil {
		t.Errorf("a write on the majority's side: %v", err)
	}
	c.Heal(iso)
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 {
		t.Errorf("after healing, the read on the isolated member = %v, %v; want the majority's write", resp, err)
	}
}
