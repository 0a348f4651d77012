package etcdfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/fencing/etcdfence"
)

func key(testing.TB) string { return fmt.Sprintf("etcdfence-%d", time.Now().UnixNano()) }

// The user's ops run in the fence's transaction, or none does; tokens
// compare as numbers across a change of digit count.
func TestTxnRunsUserOps(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, addr)
	f := etcdfence.Fence{KV: c}
	k := key(t)
	if _, err := f.Txn(ctx, k, 9, clientv3.OpPut(k+"/a", "1"), clientv3.OpPut(k+"/b", "2")); err != nil {
		t.Fatal(err)
	}
	resp, err := f.Txn(ctx, k, 10, clientv3.OpGet(k+"/a"), clientv3.OpPut(k+"/a", "3"))
	if err != nil {
		t.Fatalf("Txn(10) after 9 = %v, want nil (10 > 9 although \"10\" < \"9\")", err)
	}
	if got := string(resp.Responses[1].GetResponseRange().Kvs[0].Value); got != "1" {
		t.Errorf("the user's Get in the Txn = %q, want 1", got)
	}
	var se *fencing.StaleError
	if _, err := f.Txn(ctx, k, 9, clientv3.OpPut(k+"/a", "stale")); !errors.As(err, &se) || se.Token != 9 || se.Current != 10 || se.Resource != k {
		t.Fatalf("Txn(9) after 10 = %v, want a *StaleError 9, 10", err)
	}
	if got, _ := c.Get(ctx, k+"/a"); string(got.Kvs[0].Value) != "3" {
		t.Errorf("%s/a = %q, want 3", k, got.Kvs[0].Value)
	}
	if err := f.Delete(ctx, k+"/b", 1); err != nil {
		t.Fatal(err) // its own fence
	}
	if err := f.Put(ctx, k+"/b", 0, "x"); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("Put(0) after Delete(1) = %v, want stale: the fence outlives the key", err)
	}
	if got, _ := c.Get(ctx, f.TokenKey(k)); string(got.Kvs[0].Value) != etcdfence.Encode(10) {
		t.Errorf("the fence = %q, want %q", got.Kvs[0].Value, etcdfence.Encode(10))
	}
}

func TestMistakes(t *testing.T) {
	ctx := context.Background()
	f := etcdfence.Fence{KV: newClient(t, addr)}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"no KV", etcdfence.Fence{}.Put(ctx, "k", 1, "v"), "without a KV"},
		{"empty key", f.Put(ctx, "", 1, "v"), "empty key"},
		{"a negative token", f.Advance(ctx, "k", -1), "negative"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || errors.Is(c.err, fencing.ErrStale) {
			t.Errorf("%s: %v, want an error naming %q", c.name, c.err, c.want)
		}
	}
	k := key(t)
	if _, err := f.Txn(ctx, k, 1, clientv3.OpPut(f.TokenKey(k), "x")); err == nil {
		t.Error("Txn with an op on the fence's own key = nil, want etcd's duplicate key error")
	}
}

// BenchmarkPut is a Put, and the same Put under the fence's Txn.
func BenchmarkPut(b *testing.B) {
	ctx := context.Background()
	c := newClient(b, addr)
	f := etcdfence.Fence{KV: c}
	b.Run("unfenced", func(b *testing.B) {
		k := key(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Put(ctx, k, "row"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		k := key(b)
		b.ReportAllocs()
		var tok int64
		for b.Loop() {
			tok++
			if err := f.Put(ctx, k, tok, "row"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
