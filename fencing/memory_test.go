package fencing_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/zukhruf/lease/fencing"
)

func TestMemoryZeroValue(t *testing.T) {
	var m fencing.Memory
	if tok, ok := m.Token("r"); ok || tok != 0 {
		t.Fatalf("Token() = %d, %v, want 0, false", tok, ok)
	}
	// With no fence raised, any token passes, a negative one too.
	if err := m.Advance(context.Background(), "r", -3); err != nil {
		t.Fatalf("Advance(-3) = %v, want nil", err)
	}
}

func TestMemoryRefusesLowerToken(t *testing.T) {
	ctx := context.Background()
	var m fencing.Memory
	var wrote []int64
	write := func(tok int64) error {
		return m.Do(ctx, "r", tok, func(context.Context) error { wrote = append(wrote, tok); return nil })
	}
	for _, c := range []struct {
		name  string
		token int64
		stale bool
	}{
		{"first", 5, false},
		{"equal", 5, false},
		{"higher", 7, false},
		{"lower", 6, true},
		{"much lower", 1, true},
		{"equal again", 7, false},
	} {
		err := write(c.token)
		if got := errors.Is(err, fencing.ErrStale); got != c.stale {
			t.Fatalf("%s: Do(%d) = %v, want stale %v", c.name, c.token, err, c.stale)
		}
		var se *fencing.StaleError
		if c.stale && (!errors.As(err, &se) || se.Current != 7 || se.Token != c.token || se.Resource != "r") {
			t.Errorf("%s: Do(%d) = %#v, want a *StaleError r, %d, 7", c.name, c.token, err, c.token)
		}
	}
	want := []int64{5, 5, 7, 7}
	if len(wrote) != len(want) {
		t.Fatalf("writes run = %v, want %v", wrote, want)
	}
	// Another resource has a fence of its own.
	if err := m.Advance(ctx, "s", 1); err != nil {
		t.Errorf("Advance(s, 1) = %v, want nil", err)
	}
}

func TestMemoryFailedWriteDoesNotRaise(t *testing.T) {
	ctx := context.Background()
	var m fencing.Memory
	boom := errors.New("disk full")
	if err := m.Do(ctx, "r", 9, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do() = %v, want %v", err, boom)
	}
	if err := m.Advance(ctx, "r", 3); err != nil {
		t.Fatalf("Advance(3) after a failed write of 9 = %v, want nil", err)
	}
}

func TestMemoryWaitCutByContext(t *testing.T) {
	var m fencing.Memory
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- m.Do(context.Background(), "r", 1, func(context.Context) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := m.Do(ctx, "r", 2, func(context.Context) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Do() with an ended ctx while another runs = %v, ran %v; want context.Canceled, not run", err, ran)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The check and the write of one resource never interleave: each write
// sees the value that the write of the token it passed left.
func TestMemoryConcurrentWritesSerialize(t *testing.T) {
	ctx := context.Background()
	var m fencing.Memory
	var value, accepted int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 50 {
				tok := int64((g*7 + i*13) % 40)
				_ = m.Do(ctx, "r", tok, func(context.Context) error {
					if value > tok {
						t.Errorf("write of token %d ran over the value of token %d", tok, value)
					}
					value = tok
					accepted++
					return nil
				})
			}
		})
	}
	wg.Wait()
	if tok, _ := m.Token("r"); tok != value || accepted == 0 {
		t.Errorf("Token() = %d, last write %d (%d accepted), want equal", tok, value, accepted)
	}
}
