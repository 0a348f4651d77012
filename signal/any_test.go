package signal_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

// lostErr returns the *lost.Error that c's signal reports.
func lostErr(t *testing.T, c *controller.Controller) *lost.Error {
	t.Helper()
	var le *lost.Error
	if !errors.As(c.Signal().Err(), &le) {
		t.Fatalf("%v: Err() = %v, want a *lost.Error", c, c.Signal().Err())
	}
	return le
}

// wantMergedLost fails unless sig is lost with the very error want.
func wantMergedLost(t *testing.T, sig *signal.Signal, want *lost.Error) {
	t.Helper()
	var got *lost.Error
	if !errors.As(sig.Err(), &got) {
		t.Fatalf("Err() = %v, want %v", sig.Err(), want)
	}
	if got != want { // the same value, not an equal one
		t.Errorf("Err() = %p (%v), want the source's error %p (%v)", got, got, want, want)
	}
	if !isClosed(sig.Done()) {
		t.Errorf("Done() is open after a loss, want closed")
	}
}

// wantMergedLive fails unless sig reads as live: no error, Done open.
func wantMergedLive(t *testing.T, sig *signal.Signal) {
	t.Helper()
	if err := sig.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	if isClosed(sig.Done()) {
		t.Errorf("Done() is closed, want open")
	}
}

func newControllers(n int) ([]*controller.Controller, []*signal.Signal) {
	cs := make([]*controller.Controller, n)
	sigs := make([]*signal.Signal, n)
	for i := range cs {
		cs[i] = controller.New(fmt.Sprintf("s%d", i))
		sigs[i] = cs[i].Signal()
	}
	return cs, sigs
}

// The first source to be lost decides the merged signal's error, whichever
// it is and however many sources there are.
func TestAnyFirstLossWins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		first int // the source lost first
	}{
		{"one", 1, 0},
		{"two/first", 2, 0},
		{"two/second", 2, 1},
		{"five/middle", 5, 2},
		{"five/last", 5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, sigs := newControllers(tc.n)
			merged, release := signal.Any(sigs...)
			defer release()
			done := merged.Done() // asked for before the loss: closed by it
			wantMergedLive(t, merged)

			cs[tc.first].Lose(errRefused)
			want := lostErr(t, cs[tc.first])
			wantMergedLost(t, merged, want)
			if !isClosed(done) {
				t.Errorf("Done() from before the loss is open, want closed")
			}
			for i, c := range cs {
				if i != tc.first {
					c.Lose(fmt.Errorf("later loss %d", i))
				}
			}
			wantMergedLost(t, merged, want)
			if !errors.Is(merged.Err(), errRefused) {
				t.Errorf("errors.Is(Err(), errRefused) = false, want true")
			}
			if got := want.Subject(); got != fmt.Sprintf("s%d", tc.first) {
				t.Errorf("Err().Subject() = %q, want the lost source's subject", got)
			}
		})
	}
}

// Any of no signal is never lost: there is nothing that could lose it.
func TestAnyOfNothing(t *testing.T) {
	merged, release := signal.Any()
	wantMergedLive(t, merged)
	if got, want := merged.String(), `signal.Signal("", live)`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	release()
	wantMergedLive(t, merged)
	if got, want := merged.String(), `signal.Signal("", ended)`; got != want {
		t.Errorf("String() after release = %s, want %s", got, want)
	}
}

// Any of one follows it but is a signal of its own: its release does not
// release the source.
func TestAnyOfOne(t *testing.T) {
	c := controller.New("orders")
	merged, release := signal.Any(c.Signal())
	if merged == c.Signal() {
		t.Fatalf("Any(s) = s, want a new signal")
	}
	if got, want := merged.String(), `signal.Signal("orders", live)`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	release()
	if !c.Lose(errRefused) {
		t.Fatalf("Lose after the merged signal's release = false, want true: the source was ended")
	}
	wantMergedLive(t, merged)

	c2 := controller.New("orders")
	merged2, release2 := signal.Any(c2.Signal())
	defer release2()
	c2.Lose(errRefused)
	wantMergedLost(t, merged2, lostErr(t, c2))
}

// A source lost before Any makes the merged signal lost at once, with the
// error of the first lost source in the order given.
func TestAnyOfLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost []int // sources lost before Any, in this order
		want int
	}{
		{"only", []int{0}, 0},
		{"second", []int{1}, 1},
		{"order given wins over order lost", []int{2, 1}, 1},
		{"all", []int{0, 1, 2}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 3
			cs, sigs := newControllers(n)
			for _, i := range tc.lost {
				cs[i].Lose(fmt.Errorf("cause %d", i))
			}
			merged, release := signal.Any(sigs...)
			defer release()
			wantMergedLost(t, merged, lostErr(t, cs[tc.want]))
			for _, c := range cs {
				c.Lose(errRefused)
			}
			wantMergedLost(t, merged, lostErr(t, cs[tc.want]))
		})
	}
}

// A released source never loses the merged signal, before Any or after.
func TestAnyEndedSourceNeverLoses(t *testing.T) {
	t.Run("ended before Any", func(t *testing.T) {
		cs, sigs := newControllers(2)
		cs[0].End()
		merged, release := signal.Any(sigs...)
		defer release()
		cs[0].Lose(errRefused) // does nothing: ended
		wantMergedLive(t, merged)
		cs[1].Lose(errRefused)
		wantMergedLost(t, merged, lostErr(t, cs[1]))
	})
	t.Run("ended after Any", func(t *testing.T) {
		cs, sigs := newControllers(2)
		merged, release := signal.Any(sigs...)
		defer release()
		cs[0].End()
		cs[0].Lose(errRefused)
		wantMergedLive(t, merged)
		cs[1].Lose(errRefused)
		wantMergedLost(t, merged, lostErr(t, cs[1]))
	})
	t.Run("every source ended", func(t *testing.T) {
		cs, sigs := newControllers(3)
		merged, release := signal.Any(sigs...)
		defer release()
		for _, c := range cs {
			c.End()
			c.Lose(errRefused)
		}
		wantMergedLive(t, merged)
	})
}

// Release ends the merged signal: nothing loses it after, its callbacks are
// dropped and its contexts stay live. The sources go on as before.
func TestAnyRelease(t *testing.T) {
	cs, sigs := newControllers(2)
	merged, release := signal.Any(sigs...)
	ran := make(chan struct{}, 1)
	stop := merged.AfterLoss(func() { ran <- struct{}{} })
	ctx, cancel := merged.Context(context.Background())
	defer cancel()

	release()
	release() // again: does nothing
	for _, c := range cs {
		if !c.Lose(errRefused) {
			t.Errorf("%v: Lose after the merged signal's release = false, want true", c)
		}
	}
	wantMergedLive(t, merged)
	if ctx.Err() != nil {
		t.Errorf("ctx.Err() after release and loss = %v, want nil", ctx.Err())
	}
	if stop() {
		t.Errorf("stop() after release = true, want false: the callback was dropped")
	}
	select {
	case <-ran:
		t.Errorf("AfterLoss callback ran after release")
	default:
	}
	if got, want := merged.String(), `signal.Signal("s0, s1", ended)`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
}

// Release after the loss keeps the loss, as End does.
func TestAnyReleaseKeepsLoss(t *testing.T) {
	cs, sigs := newControllers(2)
	merged, release := signal.Any(sigs...)
	cs[1].Lose(errRefused)
	release()
	wantMergedLost(t, merged, lostErr(t, cs[1]))
	if got, want := merged.String(), `signal.Signal("s0, s1", lost: the coordinator refused the claim)`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
}

// What a holder does with a signal works on a merged one: contexts are
// cancelled with the source's error as cause, callbacks run, and merged
// signals merge again.
func TestAnyUses(t *testing.T) {
	cs, sigs := newControllers(3)
	inner, releaseInner := signal.Any(sigs[0], sigs[1])
	defer releaseInner()
	outer, releaseOuter := signal.Any(inner, sigs[2])
	defer releaseOuter()

	ctx, cancel := outer.Context(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	outer.AfterLoss(func() { ran <- outer.Err() })

	cs[1].Lose(errRefused)
	want := lostErr(t, cs[1])
	wantMergedLost(t, inner, want)
	wantMergedLost(t, outer, want)
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("ctx.Err() = %v, want context.Canceled", ctx.Err())
	}
	var got *lost.Error
	if !errors.As(context.Cause(ctx), &got) || got != want {
		t.Errorf("context.Cause(ctx) = %v, want the source's error", context.Cause(ctx))
	}
	select {
	case err := <-ran:
		if err != error(want) {
			t.Errorf("Err() in AfterLoss callback = %v, want the source's error", err)
		}
	case <-time.After(10 * time.Second): // guards against a hang only
		t.Fatalf("AfterLoss callback did not run")
	}
}

func TestAnyNilPanics(t *testing.T) {
	c := controller.New("orders")
	for _, tc := range []struct {
		name string
		sigs []*signal.Signal
	}{
		{"nil", []*signal.Signal{nil}},
		{"nil after a signal", []*signal.Signal{c.Signal(), nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				const want = "signal: Any called with a nil *Signal"
				if r := recover(); r != want {
					t.Errorf("Any(%v) panicked with %v, want %q", tc.sigs, r, want)
				}
			}()
			signal.Any(tc.sigs...)
		})
	}
}

// Losses of different sources, releases and Any itself race; whoever wins,
// the merged signal reports the error of a source that was lost, and
// agrees with itself.
func TestAnyConcurrent(t *testing.T) {
	const rounds = 200
	for range rounds {
		cs, sigs := newControllers(4)
		merged, release := signal.Any(sigs...)
		done := merged.Done()
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() { c.Lose(fmt.Errorf("cause %d", i)) })
		}
		late := make(chan *signal.Signal, 1)
		wg.Go(func() {
			m, r := signal.Any(sigs...)
			defer r()
			<-m.Done()
			late <- m
		})
		wg.Wait()
		<-done
		var got *lost.Error
		if !errors.As(merged.Err(), &got) {
			t.Fatalf("Err() = %v, want a *lost.Error", merged.Err())
		}
		found := false
		for _, c := range cs {
			if lostErr(t, c) == got {
				found = true
			}
		}
		if !found {
			t.Fatalf("Err() = %v, not the error of any source", got)
		}
		if m := <-late; m.Err() == nil {
			t.Fatalf("merged signal made during the losses: Err() = nil after Done")
		}
		release()
	}

	// Release racing a loss: the merged signal ends up either lost with the
	// source's error or ended, never anything else.
	for range rounds {
		cs, sigs := newControllers(2)
		merged, release := signal.Any(sigs...)
		var wg sync.WaitGroup
		wg.Go(func() { cs[0].Lose(errRefused) })
		wg.Go(release)
		wg.Wait()
		if err := merged.Err(); err != nil {
			wantMergedLost(t, merged, lostErr(t, cs[0]))
		} else {
			wantMergedLive(t, merged)
		}
	}
}

// heapAlloc returns the bytes of live heap after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// makeMerged makes n merged signals over src and a short-lived signal each,
// with a channel and a context of their own. When release is set, it
// releases each at once, after registering a callback that the release
// drops; otherwise it returns the release funcs. (Unreleased ones get no
// callback: their loss would start a goroutine per callback, and the
// runtime keeps the descriptors of goroutines it has run.)
func makeMerged(n int, src *signal.Signal, release bool) (kept []func()) {
	for range n {
		other := controller.New("shard")
		m, r := signal.Any(src, other.Signal())
		m.Done()
		m.Context(context.Background()) // its cancel is not needed: the loss or the release ends it
		if release {
			m.AfterLoss(func() {})
			r()
			other.End()
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// The leak of the Web's AbortSignal.any (nodejs/node issues 48419, 54614,
// 55351) is a long-lived source that keeps every merged signal ever made
// from it. Here a million merged signals made and released over one live
// lease leave the heap where it was; so do merged signals that were used
// (a channel, a context, a callback, a second source) before release.
func TestAnyReleasedLeavesHeapFlat(t *testing.T) {
	const bound = 256 << 10 // bytes; one leaked byte per merged signal is 1 MB
	src := controller.New("orders")
	makeMerged(1000, src.Signal(), true) // warm up pools and size classes

	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	before := heapAlloc()
	for range n {
		_, release := signal.Any(src.Signal())
		release()
	}
	after := heapAlloc()
	growth := int64(after) - int64(before)
	t.Logf("%d merged signals made and released: heap %d -> %d bytes (%+d)", n, before, after, growth)
	if growth > bound {
		t.Errorf("heap grew by %d bytes over %d released merged signals, want at most %d", growth, n, bound)
	}

	const used = 100_000
	before = heapAlloc()
	makeMerged(used, src.Signal(), true)
	after = heapAlloc()
	growth = int64(after) - int64(before)
	t.Logf("%d merged signals used and released: heap %d -> %d bytes (%+d)", used, before, after, growth)
	if growth > bound {
		t.Errorf("heap grew by %d bytes over %d used and released merged signals, want at most %d", growth, used, bound)
	}

	// The source is still live and still works.
	if !src.Lose(errRefused) {
		t.Errorf("Lose() = false, want true")
	}
}

// The same measure catches what release prevents: merged signals that are
// not released stay on the live source. Without this, the test above could
// pass because the measure sees nothing.
func TestAnyUnreleasedIsKept(t *testing.T) {
	const n = 20_000
	const least = n * 100 // bytes; a merged signal with its registration takes more
	src := controller.New("orders")
	before := heapAlloc()
	kept := makeMerged(n, src.Signal(), false)
	after := heapAlloc()
	growth := int64(after) - int64(before)
	t.Logf("%d merged signals not released: heap %d -> %d bytes (%+d)", n, before, after, growth)
	if growth < least {
		t.Errorf("heap grew by %d bytes over %d unreleased merged signals, want at least %d", growth, n, least)
	}
	// The loss of the source takes every registration off, released or not.
	src.Lose(errRefused)
	runtime.KeepAlive(kept)
	kept = nil
	if afterLoss := heapAlloc(); int64(afterLoss)-int64(before) > least {
		t.Errorf("heap after the source's loss = %d bytes, want within %d of %d", afterLoss, least, before)
	}
}

// A merged signal of two costs a handful of allocations, however long the
// sources live.
func TestAnyAllocs(t *testing.T) {
	a, b := controller.New("orders"), controller.New("shard")
	got := testing.AllocsPerRun(1000, func() {
		_, release := signal.Any(a.Signal(), b.Signal())
		release()
	})
	// The merged lease, the registrations, the func they share and the
	// release func; the joined subject is made only when String asks.
	const want = 4
	if got != want {
		t.Errorf("Any of two and release: %v allocations, want %d", got, want)
	}
}

// BenchmarkAny merges two live signals and releases the merged one, the
// cost a holder pays per unit of work done under two leases.
func BenchmarkAny(b *testing.B) {
	lock, leader := controller.New("orders/42"), controller.New("leader/shard-7")
	b.ReportAllocs()
	for b.Loop() {
		_, release := signal.Any(lock.Signal(), leader.Signal())
		release()
	}
}

// When one source is lost, the merged signals it loses leave the other
// sources too: a long-lived second source must not keep them, even when
// nobody releases them.
func TestAnyLostLeavesOtherSources(t *testing.T) {
	const n = 20_000
	const bound = n * 100 // bytes; a kept merged signal with its channel costs several hundred
	lostSrc, liveSrc := controller.New("orders"), controller.New("leader")
	before := heapAlloc()
	for range n {
		merged, _ := signal.Any(lostSrc.Signal(), liveSrc.Signal()) // never released
		merged.Done()
	}
	lostSrc.Lose(errRefused)
	after := heapAlloc()
	growth := int64(after) - int64(before)
	t.Logf("%d merged signals over a lost and a live source: heap %+d bytes after the loss", n, growth)
	if growth > bound {
		t.Errorf("heap grew by %d bytes after the loss of one source, want at most %d: the live source keeps the merged signals", growth, bound)
	}
	runtime.KeepAlive(liveSrc)
}

// A source lost while Any is still registering on the later sources takes
// the merged signal off those Any has reached; Any must take it off the ones
// it reaches after, or a live source keeps the lost merged signal for ever.
// Many copies of one long-lived source make Any's loop long, and the loss
// comes a little later in each round, so that in some rounds it falls inside
// the loop. A pass proves nothing about the rounds where it did not; a
// failure is always the bug.
func TestAnyLostWhileAnyRegisters(t *testing.T) {
	const rounds, copies = 200, 500
	long := controller.New("leader")
	sigs := make([]*signal.Signal, 1+copies)
	for i := 1; i < len(sigs); i++ {
		sigs[i] = long.Signal()
	}
	for round := range rounds {
		c := controller.New("orders")
		sigs[0] = c.Signal()
		var start atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for !start.Load() {
				runtime.Gosched()
			}
			for range round * 4 {
				runtime.Gosched()
			}
			c.Lose(errRefused)
		})
		merged := func() weak.Pointer[signal.Signal] {
			start.Store(true)
			m, _ := signal.Any(sigs...) // not released: the loss must be enough
			return weak.Make(m)
		}()
		wg.Wait()
		// Lose and Any have returned, and they start nothing that runs on.
		runtime.GC()
		if merged.Value() != nil {
			t.Fatalf("round %d: a live source keeps a merged signal that was lost while Any registered it", round)
		}
	}
	runtime.KeepAlive(long)
}

// A loss is not atomic across views, but Lose returns only once every
// context made from the signal is cancelled and every merged signal over it
// lost, each with the loss, nested merges included: nothing after Lose
// returns waits for them.
func TestLoseReturnsAfterRegistrations(t *testing.T) {
	const n = 100
	c := controller.New("orders")
	sig := c.Signal()
	var ctxs []context.Context
	var merged []*signal.Signal
	for range n {
		ctx, cancel := sig.Context(context.Background())
		defer cancel()
		ctxs = append(ctxs, ctx)
		m, release := signal.Any(sig, controller.New("shard").Signal())
		defer release()
		mm, release2 := signal.Any(m)
		defer release2()
		merged = append(merged, m, mm)
		mctx, mcancel := mm.Context(context.Background())
		defer mcancel()
		ctxs = append(ctxs, mctx)
	}
	if !c.Lose(errRefused) {
		t.Fatal("Lose() = false, want true")
	}
	want := lostErr(t, c)
	for i, ctx := range ctxs {
		if got := context.Cause(ctx); got != want {
			t.Fatalf("context %d: Cause() = %v just after Lose returned, want %v", i, got, want)
		}
	}
	for i, m := range merged {
		if got := m.Err(); got != want {
			t.Fatalf("merged signal %d: Err() = %v just after Lose returned, want %v", i, got, want)
		}
	}
}

// A signal merged from 1,000 sources, one of them lost: the merged signal is
// lost with that source's error, every one of the other 999 holds no
// registration afterwards, and round after round the heap stays flat.
func TestAnyScaleLeavesSources(t *testing.T) {
	const sources = 1000
	const rounds = 200
	const bound = 256 << 10 // bytes; one leaked registration per round is more
	sigs := make([]*signal.Signal, sources)
	for i := range sources - 1 {
		sigs[i] = controller.New(fmt.Sprint("shard/", i)).Signal()
	}
	round := func() {
		c := controller.New("lock")
		sigs[sources-1] = c.Signal()
		merged, release := signal.Any(sigs...)
		defer release()
		c.Lose(errRefused)
		if got, want := merged.Err(), lostErr(t, c); got != want {
			t.Fatalf("merged Err() = %v, want %v", got, want)
		}
		for i, s := range sigs[:sources-1] {
			if n := signal.Registrations(s); n != 0 {
				t.Fatalf("source %d keeps %d registrations after the loss, want 0", i, n)
			}
		}
	}
	round() // warm up
	before := heapAlloc()
	for range rounds {
		round()
	}
	after := heapAlloc()
	growth := int64(after) - int64(before)
	t.Logf("%d rounds of Any over %d sources: heap %d -> %d bytes (%+d)", rounds, sources, before, after, growth)
	if growth > bound {
		t.Errorf("heap grew by %d bytes over %d rounds, want at most %d", growth, rounds, bound)
	}
}
