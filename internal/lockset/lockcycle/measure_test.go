package lockcycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/internal/lockset/lockcycle"
	"github.com/zukhruf/lease/leasetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// small is a Config that a test runs in well under a second.
var small = lockcycle.Config{Cycles: 50, MinCycles: 50, Goroutines: 4, PerGoroutine: 5, HandOvers: 5, Settle: 5 * time.Millisecond, Warmup: 2}

func TestMeasureMemory(t *testing.T) {
	var m leasetest.Memory
	r, err := lockcycle.Measure(context.Background(), &m, &m, small)
	if err != nil {
		t.Fatalf("Measure: %v", err)
	}
	if r.Cycles != 50 || r.Goroutines != 4 || r.Parallel != 20 || r.HandOvers != 5 {
		t.Errorf("counts = %d cycles, %d goroutines, %d parallel, %d hand-overs, want 50, 4, 20, 5", r.Cycles, r.Goroutines, r.Parallel, r.HandOvers)
	}
	if r.CycleP50 <= 0 || r.CycleP99 < r.CycleP50 {
		t.Errorf("cycle p50 = %v, p99 = %v, want 0 < p50 <= p99", r.CycleP50, r.CycleP99)
	}
	if r.PerSecond <= 0 {
		t.Errorf("PerSecond = %v, want > 0", r.PerSecond)
	}
	if r.HandOverP50 <= 0 || r.HandOverMax < r.HandOverP50 {
		t.Errorf("hand-over p50 = %v, max = %v, want 0 < p50 <= max", r.HandOverP50, r.HandOverMax)
	}
	// Nothing is left held: every subject Measure took is free.
	for _, s := range []string{"cycle-u-0", "cycle-u-49", "cycle-t3-4", "cycle-w-1", "cycle-h"} {
		le, err := m.TryLock(context.Background(), s)
		if err != nil {
			t.Fatalf("TryLock(%q) after Measure: %v", s, err)
		}
		le.Unlock(context.Background())
	}
}

// TestResultAdd checks that two rounds added are one result of all their
// samples.
func TestResultAdd(t *testing.T) {
	var m leasetest.Memory
	var sum lockcycle.Result
	for range 2 {
		r, err := lockcycle.Measure(context.Background(), &m, &m, small)
		if err != nil {
			t.Fatalf("Measure: %v", err)
		}
		sum = sum.Add(r)
	}
	if sum.Cycles != 100 || sum.Goroutines != 4 || sum.Parallel != 40 || sum.HandOvers != 10 {
		t.Errorf("counts = %d cycles, %d goroutines, %d parallel, %d hand-overs, want 100, 4, 40, 10", sum.Cycles, sum.Goroutines, sum.Parallel, sum.HandOvers)
	}
	if sum.CycleP50 <= 0 || sum.CycleP99 < sum.CycleP50 || sum.PerSecond <= 0 || sum.HandOverP50 <= 0 || sum.HandOverMax < sum.HandOverP50 {
		t.Errorf("figures = %+v, want each above 0 and each p50 at most its p99 or max", sum)
	}
}

// TestMeasureHandOverWaits checks that the hand-over is timed from the
// holder's Unlock: a waiter held back in its Lock by a pause shows the pause.
func TestMeasureHandOverWaits(t *testing.T) {
	var m leasetest.Memory
	slow := slowUnlock{Locker: &m, d: 20 * time.Millisecond}
	r, err := lockcycle.Measure(context.Background(), slow, &m, small)
	if err != nil {
		t.Fatalf("Measure: %v", err)
	}
	if r.HandOverP50 < slow.d {
		t.Errorf("hand-over p50 = %v, want at least the holder's Unlock, %v", r.HandOverP50, slow.d)
	}
	if r.CycleP50 < slow.d {
		t.Errorf("cycle p50 = %v, want at least Unlock's %v", r.CycleP50, slow.d)
	}
}

func TestMeasureErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name  string
		fails int // FailNext calls before Measure
		phase string
	}{
		{"warm-up", 1, "warm-up"},
		{"one goroutine", 2*small.Warmup + 1, "one goroutine, cycle 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m leasetest.Memory
			fails := &failAfter{Locker: &m, after: tt.fails - 1, err: boom}
			_, err := lockcycle.Measure(context.Background(), fails, fails, small)
			if !errors.Is(err, boom) || !strings.Contains(err.Error(), tt.phase) {
				t.Errorf("Measure = %v, want an error wrapping %v that names %q", err, boom, tt.phase)
			}
		})
	}
}

// TestMeasureWaiterGrantedWhileHeld checks that a waiter granted a held
// subject is reported, not timed.
func TestMeasureWaiterGrantedWhileHeld(t *testing.T) {
	var a, b leasetest.Memory // two coordinators: b knows nothing of a's holder
	_, err := lockcycle.Measure(context.Background(), &a, &b, small)
	if err == nil || !strings.Contains(err.Error(), "while the holder held it") {
		t.Errorf("Measure = %v, want the waiter granted while held", err)
	}
}

// slowUnlock is a Locker whose leases take d to Unlock.
type slowUnlock struct {
	lease.Locker
	d time.Duration
}

func (s slowUnlock) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	le, err := s.Locker.Lock(ctx, subject)
	if err != nil {
		return nil, err
	}
	return slowLease{le, s.d}, nil
}

type slowLease struct {
	lease.Lease
	d time.Duration
}

func (l slowLease) Unlock(ctx context.Context) error {
	time.Sleep(l.d)
	return l.Lease.Unlock(ctx)
}

// failAfter is a Locker whose Lock fails with err after its first after
// calls.
type failAfter struct {
	lease.Locker
	after int
	err   error
}

func (f *failAfter) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	if f.after == 0 {
		return nil, f.err
	}
	f.after--
	return f.Locker.Lock(ctx, subject)
}

func TestTable(t *testing.T) {
	rows := []lockcycle.Row{{Coordinator: "Redis", Client: "redislease", Learns: "push",
		Result: lockcycle.Result{Cycles: 3000, Goroutines: 32, CycleP50: 412 * time.Microsecond, CycleP99: 1234 * time.Microsecond, PerSecond: 12345.6,
			HandOverP50: 250 * time.Millisecond, HandOverMax: 12 * time.Second}}}
	got := lockcycle.Table(rows)
	want := "| Redis | redislease | 412 µs | 1.23 ms (3,000) | 12,346 | 250 ms | 12.0 s | push |\n"
	if !strings.HasSuffix(got, want) || !strings.Contains(got, "| cycles/s at 32 goroutines |") {
		t.Errorf("Table = %q, want it to end %q", got, want)
	}
}

func TestReplace(t *testing.T) {
	doc := "# Benchmarks\n\nText.\n"
	once := lockcycle.Replace(doc, "## The lock cycle", "table 1")
	if !strings.HasPrefix(once, doc) || !strings.Contains(once, "## The lock cycle\n\n"+lockcycle.Begin+"\ntable 1\n"+lockcycle.End+"\n") {
		t.Fatalf("Replace into a doc without the section = %q", once)
	}
	twice := lockcycle.Replace(once+"\nAfter.\n", "## The lock cycle", "table 2\n")
	if strings.Contains(twice, "table 1") || strings.Count(twice, lockcycle.Begin) != 1 || !strings.HasSuffix(twice, lockcycle.End+"\n\nAfter.\n") || !strings.Contains(twice, "\ntable 2\n") {
		t.Errorf("Replace of the section = %q", twice)
	}
}
