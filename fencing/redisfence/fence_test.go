package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/fencing/redisfence"
)

func client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func key(t testing.TB) string { return fmt.Sprintf("redisfence-%d", time.Now().UnixNano()) }

func TestHSetAndDel(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	f := redisfence.Fence{Client: c}
	k := key(t)
	if err := f.HSet(ctx, k, 4, "status", "paid", "by", "holder 4"); err != nil {
		t.Fatal(err)
	}
	var se *fencing.StaleError
	if err := f.HSet(ctx, k, 3, "status", "void"); !errors.As(err, &se) || se.Current != 4 || se.Token != 3 || se.Resource != k {
		t.Fatalf("HSet(3) after 4 = %v, want a *StaleError 3, 4", err)
	}
	if got := c.HGet(ctx, k, "status").Val(); got != "paid" {
		t.Errorf("status = %q, want paid", got)
	}
	if err := f.Del(ctx, k, 2); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("Del(2) after 4 = %v, want stale", err)
	}
	if err := f.Del(ctx, k, 5); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, k).Val(); n != 0 {
		t.Errorf("Exists after Del(5) = %d, want 0", n)
	}
	// The fence outlives the key.
	if err := f.Set(ctx, k, 4, "back"); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("Set(4) after Del(5) = %v, want stale", err)
	}
	if got := c.Get(ctx, f.TokenKey(k)).Val(); got != "5" {
		t.Errorf("the fence = %q, want 5", got)
	}
}

// Mistakes fail at once with an error naming them, before any call.
func TestMistakes(t *testing.T) {
	ctx := context.Background()
	f := redisfence.Fence{Client: client(t)}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"no client", redisfence.Fence{}.Set(ctx, "k", 1, "v"), "without a Client"},
		{"empty key", f.Set(ctx, "", 1, "v"), "empty key"},
		{"a token beyond 2^53", f.Set(ctx, "k", redisfence.MaxToken+1, "v"), "2^53"},
		{"a token below -2^53", f.Advance(ctx, "k", -redisfence.MaxToken-1), "2^53"},
		{"HSet without pairs", f.HSet(ctx, "k", 1, "field"), "field-value pairs"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || errors.Is(c.err, fencing.ErrStale) {
			t.Errorf("%s: %v, want an error naming %q", c.name, c.err, c.want)
		}
	}
	// 2^53 itself is exact and passes.
	k := key(t)
	if err := f.Set(ctx, k, redisfence.MaxToken, "v"); err != nil {
		t.Errorf("Set(2^53) = %v, want nil", err)
	}
	if err := f.Set(ctx, k, redisfence.MaxToken-1, "v"); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("Set(2^53-1) after 2^53 = %v, want stale", err)
	}
}

// BenchmarkSet is a SET, and the same SET under the fence's script.
func BenchmarkSet(b *testing.B) {
	ctx := context.Background()
	c := client(b)
	f := redisfence.Fence{Client: c}
	b.Run("unfenced", func(b *testing.B) {
		k := key(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Set(ctx, k, "row", 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		k := key(b) // a new fence for each run of the benchmark
		b.ReportAllocs()
		var tok int64
		for b.Loop() {
			tok++
			if err := f.Set(ctx, k, tok, "row"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
