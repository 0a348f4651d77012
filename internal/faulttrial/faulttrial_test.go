package faulttrial_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/internal/faulttrial"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a testing.TB that keeps what Errorf was given.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, format)
}

func TestCheck(t *testing.T) {
	const s = time.Second
	lostFirst := faulttrial.Trial{Lost: true, Granted: true, Overlap: -s / 2, Detection: s}
	lostLate := faulttrial.Trial{Lost: true, Granted: true, Overlap: s / 10, Detection: 3 * s}
	lostAlone := faulttrial.Trial{Lost: true, Detection: s}
	neverLost := faulttrial.Trial{}
	grantedOnly := faulttrial.Trial{Granted: true}
	cases := []struct {
		name  string
		want  faulttrial.Want
		trial faulttrial.Trial
		fails bool
	}{
		{"lost before the grant", faulttrial.NoOverlap, lostFirst, false},
		{"lost at the grant", faulttrial.NoOverlap, faulttrial.Trial{Lost: true, Granted: true}, false},
		{"lost after the grant", faulttrial.NoOverlap, lostLate, true},
		{"lost, nobody granted", faulttrial.NoOverlap, lostAlone, false},
		{"never lost", faulttrial.NoOverlap, neverLost, true},
		{"granted, never lost", faulttrial.NoOverlap, grantedOnly, true},
		{"benign, not lost", faulttrial.NoLoss, neverLost, false},
		{"benign, lost", faulttrial.NoLoss, lostAlone, true},
		{"benign, granted", faulttrial.NoLoss, grantedOnly, true},
		{"needed, lost", faulttrial.LossNeeded, lostAlone, false},
		{"needed, never lost", faulttrial.LossNeeded, neverLost, true},
		{"needed, lost after the grant", faulttrial.LossNeeded, lostLate, true},
		{"raced, lost after the grant", faulttrial.Raced, lostLate, false},
		{"raced, lost before the grant", faulttrial.Raced, lostFirst, false},
		{"raced, never lost", faulttrial.Raced, neverLost, true},
		{"raced, granted, never lost", faulttrial.Raced, grantedOnly, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b faulttrial.Book
			b.Add(faulttrial.Fault{Name: "f", Want: tc.want}, tc.trial)
			r := &recorder{TB: t}
			b.Check(r)
			if got := len(r.errors) > 0; got != tc.fails {
				t.Errorf("Check reported %d errors for %+v with %v; want a failure: %v", len(r.errors), tc.trial, tc.want, tc.fails)
			}
		})
	}
}

func TestTable(t *testing.T) {
	var b faulttrial.Book
	silent := faulttrial.Fault{Name: "silent network", Want: faulttrial.NoOverlap}
	blip := faulttrial.Fault{Name: "blip", Want: faulttrial.NoLoss}
	for _, o := range []time.Duration{-300, -100, -200} {
		b.Add(silent, faulttrial.Trial{Lost: true, Granted: true, Overlap: o * time.Millisecond, Detection: -o * 10 * time.Millisecond, Cause: "lease lost: k | x\nmore"})
	}
	b.Add(blip, faulttrial.Trial{})
	b.Add(blip, faulttrial.Trial{Lost: true, Detection: time.Second, Cause: "false"})
	revoke := faulttrial.Fault{Name: "revoke", Want: faulttrial.Raced}
	for _, o := range []time.Duration{-3000, 250, 1500} {
		b.Add(revoke, faulttrial.Trial{Lost: true, Granted: true, Overlap: o * time.Microsecond, Cause: "revoked"})
	}
	deleted := faulttrial.Fault{Name: "deleted", Want: faulttrial.Raced}
	b.Add(deleted, faulttrial.Trial{Lost: true, Granted: true, Overlap: -time.Millisecond, Cause: "deleted"})
	got := b.Table("make faults")
	for _, want := range []string{
		"| revoke | A lost; its loss races B's grant | 3 | 3 | 3 | +2 ms | +0 ms | +0 ms | 0 | 0 | revoked |",
		"Race, revoke: A was lost after B's grant in 2 of 3 trials, by at most 1.500 ms.",
		"Race, deleted: A was lost no later than B's grant in each of the 1 trials where both happened.",
		"| silent network | A lost no later than B's grant | 3 | 3 | 3 | -100 ms | -200 ms | +2000 ms | 0 | 0 | lease lost: k \\| x more |",
		"| blip | A not lost | 2 | 1 | 0 | – | – | +1000 ms | 1 | 1 | false |",
		"Command: `make faults`",
		"cores",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Table() =\n%s\nwant a line containing\n%s", got, want)
		}
	}
	if i, j := strings.Index(got, "silent network"), strings.Index(got, "| blip"); i > j {
		t.Errorf("Table() lists the faults out of the order they were added:\n%s", got)
	}
}

// In a book with a peer, A′'s figures are measured, never checked, but a
// trial without them fails.
func TestCheckPeer(t *testing.T) {
	const s = time.Second
	aFirst := faulttrial.Trial{Lost: true, Granted: true, Overlap: -s / 2, Detection: s}
	with := func(tr faulttrial.Trial, p *faulttrial.Peer) faulttrial.Trial {
		tr.Peer = p
		return tr
	}
	cases := []struct {
		name  string
		trial faulttrial.Trial
		fails bool
	}{
		{"A′ lost before B′'s grant", with(aFirst, &faulttrial.Peer{Lost: true, Granted: true, Overlap: -s, Detection: s}), false},
		{"A′ lost after B′'s grant", with(aFirst, &faulttrial.Peer{Lost: true, Granted: true, Overlap: 2 * s, Detection: 3 * s}), false},
		{"A′ never lost, B′ granted", with(aFirst, &faulttrial.Peer{Granted: true}), false},
		{"A′ never lost, B′ not granted", with(aFirst, &faulttrial.Peer{}), false},
		{"A′'s figures missing", aFirst, true},
		{"A′'s figures unrecorded", with(aFirst, &faulttrial.Peer{Unrecorded: "B′'s Lock failed"}), true},
		{"A late, A′ on time", with(faulttrial.Trial{Lost: true, Granted: true, Overlap: s}, &faulttrial.Peer{Lost: true, Granted: true, Overlap: -s}), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := faulttrial.Book{Peer: "a peer"}
			b.Add(faulttrial.Fault{Name: "f", Want: faulttrial.NoOverlap}, tc.trial)
			r := &recorder{TB: t}
			b.Check(r)
			if got := len(r.errors) > 0; got != tc.fails {
				t.Errorf("Check reported %d errors for %+v; want a failure: %v", len(r.errors), tc.trial, tc.fails)
			}
		})
	}
}

func TestTablePeer(t *testing.T) {
	b := faulttrial.Book{Peer: "etcd's Session"}
	silent := faulttrial.Fault{Name: "silent", Want: faulttrial.NoOverlap}
	for _, o := range []struct{ a, p time.Duration }{{-300, 400}, {-100, -200}, {-200, 100}} {
		b.Add(silent, faulttrial.Trial{Lost: true, Granted: true, Overlap: o.a * time.Millisecond, Detection: time.Second, Cause: "lost",
			Peer: &faulttrial.Peer{Lost: true, Granted: true, Overlap: o.p * time.Millisecond, Detection: 2 * time.Second}})
	}
	deleted := faulttrial.Fault{Name: "deleted", Want: faulttrial.Raced}
	b.Add(deleted, faulttrial.Trial{Lost: true, Granted: true, Overlap: -time.Millisecond, Detection: time.Millisecond, Cause: "deleted",
		Peer: &faulttrial.Peer{Granted: true}})
	b.Add(deleted, faulttrial.Trial{Lost: true, Granted: true, Overlap: -time.Millisecond, Detection: time.Millisecond, Cause: "deleted",
		Peer: &faulttrial.Peer{Unrecorded: "B′'s Lock failed"}})
	blip := faulttrial.Fault{Name: "blip", Want: faulttrial.NoLoss}
	b.Add(blip, faulttrial.Trial{Peer: &faulttrial.Peer{}})
	got := b.Table("make faults")
	for _, want := range []string{
		"| fault | must hold | trials | A lost | B granted | A′ lost | B′ granted | A overlap, max | A′ overlap, max | A overlap, median | A′ overlap, median | A detection, median | A′ detection, median | A′ live after B′'s grant | A's false losses | violations | A's cause (first trial lost) |",
		"| silent | A lost no later than B's grant | 3 | 3 | 3 | 3 | 3 | -100 ms | +400 ms | -200 ms | +100 ms | +1000 ms | +2000 ms | 2 | 0 | 0 | lost |",
		"| deleted | A lost; its loss races B's grant | 2 | 2 | 2 | 0 | 1 | -1 ms | – | -1 ms | – | +1 ms | – | 1 | 0 | 1 | deleted |",
		"| blip | A not lost | 1 | 0 | 0 | 0 | 0 | – | – | – | – | – | – | 0 | 0 | 0 |  |",
		"A′ is etcd's Session, run beside A in each trial",
		"A′ was still live after B′'s grant in 3 of the 5 trials recorded (B′ was granted in 4): lost after the grant in 2, by at most 400.000 ms; not lost by the end of the trial in 1.",
		"Command: `make faults`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Table() =\n%s\nwant a line containing\n%s", got, want)
		}
	}
}

func TestAddPanicsOnPeerWithoutPeer(t *testing.T) {
	var b faulttrial.Book
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.HasPrefix(s, "faulttrial: Add") {
			t.Errorf("recover() = %v, want a panic naming faulttrial: Add", r)
		}
	}()
	b.Add(faulttrial.Fault{Name: "f", Want: faulttrial.NoOverlap}, faulttrial.Trial{Peer: &faulttrial.Peer{}})
}

func TestAddPanicsOnAnotherWant(t *testing.T) {
	var b faulttrial.Book
	b.Add(faulttrial.Fault{Name: "f", Want: faulttrial.NoLoss}, faulttrial.Trial{})
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.HasPrefix(s, "faulttrial: Add") {
			t.Errorf("recover() = %v, want a panic naming faulttrial: Add", r)
		}
	}()
	b.Add(faulttrial.Fault{Name: "f", Want: faulttrial.NoOverlap}, faulttrial.Trial{})
}

func TestWriteTable(t *testing.T) {
	readme := filepath.Join(t.TempDir(), "README.md")
	const before = "# x\n\nintro\n<!-- faults:begin -->\nold table\n<!-- faults:end -->\nafter\n"
	if err := os.WriteFile(readme, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := faulttrial.WriteTable(readme, "| new |\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(readme)
	const want = "# x\n\nintro\n<!-- faults:begin -->\n| new |\n<!-- faults:end -->\nafter\n"
	if string(got) != want {
		t.Errorf("README after WriteTable =\n%q\nwant\n%q", got, want)
	}
	if err := os.WriteFile(readme, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := faulttrial.WriteTable(readme, "t"); err == nil {
		t.Error("WriteTable on a README without markers returned nil")
	}
}

func TestWriteSectionLeavesOtherSections(t *testing.T) {
	readme := filepath.Join(t.TempDir(), "README.md")
	const before = "<!-- faults:begin -->\nf\n<!-- faults:end -->\n<!-- sequences:begin -->\ns\n<!-- sequences:end -->\n"
	if err := os.WriteFile(readme, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := faulttrial.WriteSection(readme, "sequences", "| new |"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(readme)
	const want = "<!-- faults:begin -->\nf\n<!-- faults:end -->\n<!-- sequences:begin -->\n| new |\n<!-- sequences:end -->\n"
	if string(got) != want {
		t.Errorf("README after WriteSection =\n%q\nwant\n%q", got, want)
	}
}

func TestStamp(t *testing.T) {
	done := make(chan struct{})
	s := faulttrial.StampWhen(done)
	before := time.Now()
	close(done)
	at, ok := s.Stop()
	if !ok || at.Before(before) {
		t.Errorf("Stop() = %v, %v; want a time after %v", at, ok, before)
	}
	if at2, ok2 := s.Stop(); at2 != at || ok2 != ok {
		t.Errorf("second Stop() = %v, %v; want %v, %v", at2, ok2, at, ok)
	}

	never := faulttrial.StampWhen(make(chan struct{}))
	if _, ok := never.Stop(); ok {
		t.Error("Stop() of an open channel reported it closed")
	}
}

// Concurrently runs each index once, never more than atOnce at a time, and
// the first atOnce together: each of them waits until atOnce have been
// running at once, so a bound kept by running fewer at a time would never
// return.
func TestConcurrently(t *testing.T) {
	const n, atOnce = 20, 3
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		running int
		most    int
		ran     [n]int
	)
	faulttrial.Concurrently(n, atOnce, func(i int) {
		mu.Lock()
		defer mu.Unlock()
		running++
		most = max(most, running)
		ran[i]++
		cond.Broadcast()
		for i < atOnce && most < atOnce {
			cond.Wait()
		}
		running--
	})
	for i, c := range ran {
		if c != 1 {
			t.Errorf("run(%d) called %d times, want once", i, c)
		}
	}
	if most != atOnce {
		t.Errorf("at most %d runs at once, want %d", most, atOnce)
	}
}

func TestConcurrentlyPanicsOnNoneAtOnce(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "faulttrial.Concurrently") {
			t.Errorf("recover() = %v, want a panic naming faulttrial.Concurrently", r)
		}
	}()
	faulttrial.Concurrently(1, 0, func(int) {})
}
