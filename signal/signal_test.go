package signal_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

var errRefused = errors.New("the coordinator refused the claim")
var errLater = errors.New("a later loss")

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// wantLive fails unless sig reads as held or released: no error, Done open.
func wantLive(t *testing.T, sig *signal.Signal) {
	t.Helper()
	if err := sig.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	if isClosed(sig.Done()) {
		t.Errorf("Done() is closed, want open")
	}
}

// wantLost fails unless sig reads as lost on subject with cause, and returns its error.
func wantLost(t *testing.T, sig *signal.Signal, subject string, cause error) *lost.Error {
	t.Helper()
	err := sig.Err()
	var le *lost.Error
	if !errors.As(err, &le) {
		t.Fatalf("Err() = %v, want a *lost.Error", err)
	}
	if got := le.Subject(); got != subject {
		t.Errorf("Err().Subject() = %q, want %q", got, subject)
	}
	if got := le.Unwrap(); got != cause {
		t.Errorf("Err().Unwrap() = %v, want %v", got, cause)
	}
	if !isClosed(sig.Done()) {
		t.Errorf("Done() is open after a loss, want closed")
	}
	return le
}

// Rule 1: a new lease is live.
func TestNewIsLive(t *testing.T) {
	c := controller.New("orders")
	wantLive(t, c.Signal())
}

// Rule 2: Lose loses the lease once, with the subject and the cause.
func TestLose(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subject string
		cause   error
		msg     string
	}{
		{"cause", "orders", errRefused, "lease lost: orders: the coordinator refused the claim"},
		{"no cause", "orders", nil, "lease lost: orders"},
		{"wrapped cause", "shard/7", fmt.Errorf("etcd: %w", context.DeadlineExceeded), "lease lost: shard/7: etcd: context deadline exceeded"},
		{"empty subject", "", errRefused, "lease lost: the coordinator refused the claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := controller.New(tc.subject)
			sig := c.Signal()
			done := sig.Done()
			if !c.Lose(tc.cause) {
				t.Fatalf("Lose(%v) = false on a live lease, want true", tc.cause)
			}
			le := wantLost(t, sig, tc.subject, tc.cause)
			if !isClosed(done) {
				t.Errorf("the Done channel taken before the loss is open, want closed")
			}
			if got := le.Error(); got != tc.msg {
				t.Errorf("Err().Error() = %q, want %q", got, tc.msg)
			}
			wrapped := fmt.Errorf("copy rows: %w", fmt.Errorf("batch 3: %w", fmt.Errorf("post: %w", sig.Err())))
			var got *lost.Error
			if !errors.As(wrapped, &got) || got != le {
				t.Errorf("errors.As through three wraps found %v, want %v", got, le)
			}
			if tc.cause != nil && !errors.Is(wrapped, tc.cause) {
				t.Errorf("errors.Is(wrapped Err(), cause) = false, want true")
			}
			if errors.Is(wrapped, errRefused) != (tc.cause == errRefused) {
				t.Errorf("errors.Is(wrapped Err(), errRefused) = %v, want %v", !(tc.cause == errRefused), tc.cause == errRefused)
			}
		})
	}
}

// Rules 3 and 5: the first loss wins, and End keeps it.
func TestFirstLossWins(t *testing.T) {
	c := controller.New("orders")
	sig := c.Signal()
	c.Lose(errRefused)
	first := sig.Err()
	for _, step := range []struct {
		name string
		call func() bool
	}{
		{"second Lose", func() bool { return c.Lose(errors.New("later")) }},
		{"Lose(nil)", func() bool { return c.Lose(nil) }},
		{"End", c.End},
		{"End again", c.End},
		{"Lose after End", func() bool { return c.Lose(errors.New("late")) }},
	} {
		if step.call() {
			t.Errorf("%s after a loss = true, want false", step.name)
		}
		if got := sig.Err(); got != first {
			t.Errorf("after %s: Err() = %v, want the first error %v", step.name, got, first)
		}
		if !isClosed(sig.Done()) {
			t.Errorf("after %s: Done() is open, want closed", step.name)
		}
	}
}

// Rule 4: End never loses the signal, and no loss reaches the holder after it.
func TestEndBlocksLose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := controller.New("orders")
		sig := c.Signal()
		done := sig.Done()
		var ran atomic.Int32
		stop := sig.AfterLoss(func() { ran.Add(1) })
		ctx, cancel := sig.Context(context.Background())
		defer cancel()

		if !c.End() {
			t.Fatal("End() on a live lease = false, want true")
		}
		wantLive(t, sig)
		if c.Lose(errRefused) {
			t.Error("Lose after End = true, want false")
		}
		if c.End() {
			t.Error("End again = true, want false")
		}
		synctest.Wait()
		wantLive(t, sig)
		if isClosed(done) {
			t.Error("the Done channel taken before End is closed, want open")
		}
		if n := ran.Load(); n != 0 {
			t.Errorf("AfterLoss callback ran %d times after End and Lose, want 0", n)
		}
		if stop() {
			t.Error("stop() after End = true, want false: End dropped the callback")
		}
		if err := ctx.Err(); err != nil {
			t.Errorf("Context: ctx.Err() = %v after End and a late Lose, want nil", err)
		}
		// A callback registered after End is dropped too.
		if sig.AfterLoss(func() { ran.Add(1) })() {
			t.Error("stop() of a callback registered after End = true, want false")
		}
		synctest.Wait()
		if n := ran.Load(); n != 0 {
			t.Errorf("AfterLoss callback ran %d times, want 0", n)
		}
	})
}

// Rule 6: among concurrent Lose and End calls exactly one wins, and every
// view of the holder agrees with the winner.
func TestConcurrentLoseAndEnd(t *testing.T) {
	const rounds, callers = 200, 8
	causes := make([]error, callers)
	for i := range causes {
		causes[i] = fmt.Errorf("cause %d", i)
	}
	for range rounds {
		c := controller.New("orders")
		sig := c.Signal()
		var ran atomic.Int32
		callbackDone := make(chan struct{}, 1)
		sig.AfterLoss(func() { ran.Add(1); callbackDone <- struct{}{} })
		ctx, cancel := sig.Context(context.Background())

		won := make([]bool, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				if i%3 == 2 {
					won[i] = c.End()
				} else {
					won[i] = c.Lose(causes[i])
				}
			})
		}
		wg.Wait()

		winner := -1
		for i, w := range won {
			if w {
				if winner >= 0 {
					t.Fatalf("callers %d and %d both won", winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatal("no caller won")
		}
		if winner%3 == 2 {
			wantLive(t, sig)
			if ctx.Err() != nil {
				t.Errorf("End won but ctx.Err() = %v", ctx.Err())
			}
		} else {
			le := wantLost(t, sig, "orders", causes[winner])
			select {
			case <-callbackDone:
			case <-time.After(time.Minute): // a guard against a hang, not a timing
				t.Fatal("the AfterLoss callback never ran after the loss")
			}
			if cause := context.Cause(ctx); cause != le {
				t.Errorf("context.Cause(ctx) = %v, want %v", cause, le)
			}
		}
		cancel()
		if n, want := ran.Load(), int32(0); winner%3 != 2 {
			want = 1
			if n != want {
				t.Errorf("AfterLoss callback ran %d times, want %d", n, want)
			}
		} else if n != want {
			t.Errorf("AfterLoss callback ran %d times after End won, want %d", n, want)
		}
	}
}

// Rule 7: once Err returns the loss, Done is closed; Done is one channel.
func TestErrImpliesDoneClosed(t *testing.T) {
	// The window in which a wrong order would show is a few instructions
	// wide; 20,000 races find it within the first few hundred when it exists.
	for range 20000 {
		c := controller.New("orders")
		sig := c.Signal()
		done := sig.Done()
		start := make(chan struct{})
		go func() { <-start; c.Lose(errRefused) }()
		close(start)
		for sig.Err() == nil {
			// Let the loser run even where this goroutine has the only P.
			runtime.Gosched()
		}
		if !isClosed(done) {
			t.Fatal("Err() returned the loss while Done() was still open")
		}
	}
}

// Rule 7, the other way: a receiver woken by the close of Done finds the loss
// in Err.
func TestDoneImpliesErr(t *testing.T) {
	for range 20000 {
		c := controller.New("orders")
		sig := c.Signal()
		done := sig.Done()
		go c.Lose(errRefused)
		<-done
		if sig.Err() == nil {
			t.Fatal("Err() = nil after Done() was closed, want the loss")
		}
	}
}

func TestDoneIsOneChannel(t *testing.T) {
	c := controller.New("orders")
	sig := c.Signal()
	first := sig.Done()
	if second := sig.Done(); first != second {
		t.Errorf("Done() returned %v, then %v; want the same channel", first, second)
	}
	c.Lose(nil)
	if after := sig.Done(); after != first {
		t.Errorf("Done() after the loss = %v, want the channel from before, %v", after, first)
	}

	// Lost before anyone asked: Done returns a closed channel, the same one
	// for every such lease, so a loss nobody waits for makes no channel.
	a, b := controller.New("a"), controller.New("b")
	a.Lose(nil)
	b.Lose(nil)
	if da, db := a.Signal().Done(), b.Signal().Done(); !isClosed(da) || da != db {
		t.Errorf("Done() of two leases lost unasked = %v, %v; want one shared closed channel", da, db)
	}
}

// Rule 8: AfterLoss follows context.AfterFunc.
func TestAfterLoss(t *testing.T) {
	t.Run("runs once after the loss, and Lose does not wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := controller.New("orders")
			release := make(chan struct{})
			var ran atomic.Int32
			stop := c.Signal().AfterLoss(func() { ran.Add(1); <-release })
			synctest.Wait()
			if n := ran.Load(); n != 0 {
				t.Fatalf("callback ran %d times before the loss, want 0", n)
			}
			c.Lose(errRefused) // returns although the callback blocks
			c.Lose(errRefused)
			synctest.Wait()
			if n := ran.Load(); n != 1 {
				t.Errorf("callback ran %d times after the loss, want 1", n)
			}
			if stop() {
				t.Error("stop() after the callback started = true, want false")
			}
			close(release)
		})
	})
	t.Run("already lost runs at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := controller.New("orders")
			c.Lose(nil)
			var ran atomic.Int32
			stop := c.Signal().AfterLoss(func() { ran.Add(1) })
			synctest.Wait()
			if n := ran.Load(); n != 1 {
				t.Errorf("callback on a lost lease ran %d times, want 1", n)
			}
			if stop() {
				t.Error("stop() = true, want false")
			}
		})
	})
	t.Run("stop keeps it from running", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := controller.New("orders")
			sig := c.Signal()
			var ran [3]atomic.Int32
			stops := make([]func() bool, 3)
			for i := range stops {
				stops[i] = sig.AfterLoss(func() { ran[i].Add(1) })
			}
			if !stops[1]() {
				t.Error("first stop() before the loss = false, want true")
			}
			if stops[1]() {
				t.Error("second stop() = true, want false")
			}
			c.Lose(nil)
			synctest.Wait()
			for i, want := range []int32{1, 0, 1} {
				if n := ran[i].Load(); n != want {
					t.Errorf("callback %d ran %d times, want %d", i, n, want)
				}
			}
		})
	})
	// f waits until the call that starts it has returned: a call that ran f
	// on its own goroutine would never return, and synctest reports the
	// deadlock.
	for _, tc := range []struct {
		name      string
		lostFirst bool
	}{
		{"Lose starts it in its own goroutine", false},
		{"AfterLoss on a lost lease starts it in its own goroutine", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := controller.New("orders")
				if tc.lostFirst {
					c.Lose(nil)
				}
				returned, ran := make(chan struct{}), make(chan struct{})
				c.Signal().AfterLoss(func() { <-returned; close(ran) })
				c.Lose(nil) // does nothing when lostFirst
				close(returned)
				<-ran
			})
		})
	}
}

// Rule 9: the context is done when the parent is done or the lease is lost.
func TestContext(t *testing.T) {
	t.Run("loss cancels with the loss as cause", func(t *testing.T) {
		c := controller.New("orders")
		ctx, cancel := c.Signal().Context(context.Background())
		defer cancel()
		if ctx.Err() != nil {
			t.Fatalf("ctx.Err() = %v on a live lease, want nil", ctx.Err())
		}
		c.Lose(errRefused)
		if !isClosed(ctx.Done()) {
			t.Fatal("ctx.Done() is open after Lose returned, want closed")
		}
		if err := ctx.Err(); err != context.Canceled {
			t.Errorf("ctx.Err() = %v, want context.Canceled", err)
		}
		if cause := context.Cause(ctx); cause != c.Signal().Err() {
			t.Errorf("context.Cause(ctx) = %v, want %v", cause, c.Signal().Err())
		}
	})
	t.Run("already lost", func(t *testing.T) {
		c := controller.New("orders")
		c.Lose(errRefused)
		ctx, cancel := c.Signal().Context(context.Background())
		defer cancel()
		if cause := context.Cause(ctx); cause != c.Signal().Err() {
			t.Errorf("context.Cause(ctx) = %v, want %v", cause, c.Signal().Err())
		}
	})
	t.Run("parent cancel", func(t *testing.T) {
		c := controller.New("orders")
		parent, cancelParent := context.WithCancelCause(context.Background())
		ctx, cancel := c.Signal().Context(parent)
		defer cancel()
		parentCause := errors.New("shutting down")
		cancelParent(parentCause)
		if err := context.Cause(ctx); err != parentCause {
			t.Errorf("context.Cause(ctx) = %v after the parent's cancel, want %v", err, parentCause)
		}
		c.Lose(errRefused)
		if err := context.Cause(ctx); err != parentCause {
			t.Errorf("context.Cause(ctx) = %v after a later loss, want %v", err, parentCause)
		}
	})
	t.Run("values and deadline pass through", func(t *testing.T) {
		type key struct{}
		c := controller.New("orders")
		parent := context.WithValue(context.Background(), key{}, "v")
		ctx, cancel := c.Signal().Context(parent)
		defer cancel()
		if got := ctx.Value(key{}); got != "v" {
			t.Errorf("ctx.Value(key) = %v, want v", got)
		}
	})
	t.Run("cancel ends it without the loss", func(t *testing.T) {
		c := controller.New("orders")
		ctx, cancel := c.Signal().Context(context.Background())
		cancel()
		if err := context.Cause(ctx); err != context.Canceled {
			t.Errorf("context.Cause(ctx) = %v after cancel, want context.Canceled", err)
		}
		c.Lose(errRefused)
		if err := context.Cause(ctx); err != context.Canceled {
			t.Errorf("context.Cause(ctx) = %v after cancel and a loss, want context.Canceled", err)
		}
	})
	t.Run("release never cancels", func(t *testing.T) {
		c := controller.New("orders")
		ctx, cancel := c.Signal().Context(context.Background())
		defer cancel()
		c.End()
		c.Lose(errRefused)
		if err := ctx.Err(); err != nil {
			t.Errorf("ctx.Err() = %v after End and a late Lose, want nil", err)
		}
		ctx2, cancel2 := c.Signal().Context(context.Background())
		defer cancel2()
		if err := ctx2.Err(); err != nil {
			t.Errorf("ctx.Err() of a context made after End = %v, want nil", err)
		}
	})
}

// Rule 9: live lease contexts start no goroutine, whether their parent can
// be cancelled or not.
func TestContextStartsNoGoroutine(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	const leases = 1000
	before := runtime.NumGoroutine()
	cancels := make([]context.CancelFunc, 0, 2*leases)
	for i := range leases {
		sig := controller.New(fmt.Sprint("key-", i)).Signal()
		_, cancel := sig.Context(context.Background())
		_, cancel2 := sig.Context(parent)
		cancels = append(cancels, cancel, cancel2)
	}
	// A goroutine per context would add 2,000; allow a few for the runtime.
	if n := runtime.NumGoroutine() - before; n > 10 {
		t.Errorf("%d live lease contexts started %d goroutines, want none", 2*leases, n)
	}
	for _, cancel := range cancels {
		cancel()
	}
}

// Rule 10: the winning Lose synchronizes before Err, Done and the callbacks
// that observe it. The race detector reports the plain accesses to data if
// it does not.
func TestLoseSynchronizesBefore(t *testing.T) {
	observers := []struct {
		name  string
		after func(sig *signal.Signal, read func())
	}{
		{"Err", func(sig *signal.Signal, read func()) {
			for sig.Err() == nil {
			}
			read()
		}},
		{"Done", func(sig *signal.Signal, read func()) {
			<-sig.Done()
			read()
		}},
		{"AfterLoss", func(sig *signal.Signal, read func()) {
			ran := make(chan struct{})
			sig.AfterLoss(func() { read(); close(ran) })
			<-ran
		}},
		{"Context", func(sig *signal.Signal, read func()) {
			ctx, cancel := sig.Context(context.Background())
			defer cancel()
			<-ctx.Done()
			read()
		}},
	}
	for _, o := range observers {
		t.Run(o.name, func(t *testing.T) {
			c := controller.New("orders")
			data := 0
			var got int
			var wg sync.WaitGroup
			wg.Go(func() { o.after(c.Signal(), func() { got = data }) })
			data = 42
			c.Lose(nil)
			wg.Wait()
			if got != 42 {
				t.Errorf("observer read %d after the loss, want 42", got)
			}
		})
	}
}

// A lease lost while Context registers a context on it must not stay
// registered on the context's long-lived parent. The loss comes after a
// delay that cycles through the rounds, so that in some rounds it falls
// between Context's look at the lease and its registration there. A pass proves nothing about
// the rounds where it did not; a failure is always the bug.
func TestContextLostWhileContextRegisters(t *testing.T) {
	const rounds = 300
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	for round := range rounds {
		var start atomic.Bool
		var wg sync.WaitGroup
		lease := func() weak.Pointer[controller.Controller] {
			c := controller.New("orders")
			wg.Go(func() {
				for !start.Load() {
					runtime.Gosched()
				}
				for range round % 16 {
					runtime.Gosched()
				}
				c.Lose(errRefused)
			})
			start.Store(true)
			_, cancel := c.Signal().Context(parent)
			_ = cancel // not called: the loss is enough
			return weak.Make(c)
		}()
		wg.Wait()
		// Lose and Context have returned, and they start nothing that runs on.
		runtime.GC()
		if lease.Value() != nil {
			t.Fatalf("round %d: a live parent keeps a lease lost while Context registered on it", round)
		}
	}
}

// forgotten is how many contexts TestContextForgottenCancelHeapFlat makes:
// make test runs 100,000 under the race detector, make stress a million.
var forgotten = flag.Int("forgotten", 100_000, "contexts with a forgotten cancel that TestContextForgottenCancelHeapFlat makes")

// The memory a live lease holds stays bounded by the contexts that are still
// live, whatever holders forget: a million contexts made from request
// contexts that end, each cancel forgotten (go vet's lostcancel does not
// know Signal.Context), leave the heap where it was, and the lease keeps a
// handful of registrations, not a million.
func TestContextForgottenCancelHeapFlat(t *testing.T) {
	const bound = 256 << 10 // bytes; one leaked byte per context is 1 MB
	c := controller.New("orders")
	sig := c.Signal()
	forget := func(n int) {
		for range n {
			req, cancelReq := context.WithCancel(context.Background())
			ctx, cancel := sig.Context(req)
			_ = cancel // forgotten
			cancelReq()
			<-ctx.Done()
		}
	}
	forget(1000) // warm up pools and size classes

	n := *forgotten
	before := heapAlloc()
	forget(n)
	after := heapAlloc()
	growth := int64(after) - int64(before)
	t.Logf("%d contexts over ended requests, cancel forgotten: heap %d -> %d bytes (%+d), %d registrations kept",
		n, before, after, growth, signal.Registrations(sig))
	if growth > bound {
		t.Errorf("heap grew by %d bytes over %d contexts whose requests ended, want at most %d", growth, n, bound)
	}
	if got := signal.Registrations(sig); got > 2 {
		t.Errorf("the lease keeps %d registrations with no context live, want at most 2", got)
	}
	// The lease is still live and still works.
	ctx, cancel := sig.Context(context.WithValue(context.Background(), forgottenKey{}, 1))
	defer cancel()
	c.Lose(errRefused)
	if got := context.Cause(ctx); !errors.Is(got, errRefused) {
		t.Errorf("Cause() = %v after the loss, want the loss", got)
	}
}

// The bound is the contexts still live: the same measure sees contexts whose
// requests are live, each kept with its registration, so the test above
// cannot pass by measuring nothing; the loss then drops them all.
func TestContextLiveRequestsAreKept(t *testing.T) {
	const n = 20_000
	const least = n * 100 // bytes; a context with its registration takes more
	c := controller.New("orders")
	sig := c.Signal()
	before := heapAlloc()
	var cancelReqs []context.CancelFunc
	for range n {
		req, cancelReq := context.WithCancel(context.Background())
		sig.Context(req) // cancel forgotten, request live
		cancelReqs = append(cancelReqs, cancelReq)
	}
	after := heapAlloc()
	growth := int64(after) - int64(before)
	t.Logf("%d contexts over live requests: heap %d -> %d bytes (%+d), %d registrations", n, before, after, growth, signal.Registrations(sig))
	if growth < least {
		t.Errorf("heap grew by %d bytes over %d live contexts, want at least %d", growth, n, least)
	}
	if got := signal.Registrations(sig); got != n {
		t.Errorf("the lease keeps %d registrations, want %d, one per live context", got, n)
	}
	c.Lose(errRefused)
	if got := signal.Registrations(sig); got != 0 {
		t.Errorf("after the loss the lease keeps %d registrations, want 0", got)
	}
	for _, cancelReq := range cancelReqs {
		cancelReq()
	}
}

type forgottenKey struct{}

// race runs a and b at once: each starts only when both goroutines are
// running, by spinning on a counter rather than waiting on a channel, so that
// neither is still waking up when the other has already finished.
func race(a, b func()) {
	var ready atomic.Int32
	start := func(f func()) {
		ready.Add(1)
		for ready.Load() < 2 {
		}
		f()
	}
	var wg sync.WaitGroup
	wg.Go(func() { start(a) })
	start(b)
	wg.Wait()
}

// End takes no lock when nothing is registered, so a registration made at
// the same moment must find the end itself: whichever comes first, once both
// have returned the ended signal keeps no registration, and no registry for
// the signal's own context either.
func TestEndRacingRegistrationsKeepsNone(t *testing.T) {
	req, cancelReq := context.WithCancel(context.Background())
	defer cancelReq()
	registrations := []struct {
		name     string
		register func(sig *signal.Signal)
	}{
		{"AfterLoss", func(sig *signal.Signal) { sig.AfterLoss(func() {}) }},
		// The cancel funcs and the release are forgotten on purpose: the
		// end must drop what they would have.
		{"Context of a request", func(sig *signal.Signal) { sig.Context(req) }},
		{"Context of Background", func(sig *signal.Signal) { sig.Context(context.Background()) }},
		{"Any", func(sig *signal.Signal) { signal.Any(sig) }},
	}
	// On a spread registry the registration goes into a shard of the set,
	// which End takes under the shard's lock.
	for _, spread := range []bool{false, true} {
		for _, r := range registrations {
			name := r.name
			if spread {
				name += " on a spread registry"
			}
			t.Run(name, func(t *testing.T) {
				for i := range 10000 {
					c := controller.New("orders")
					sig := c.Signal()
					if spread {
						signal.Spread(sig)
					}
					race(func() { r.register(sig) }, func() { c.End() })
					if n := signal.Registrations(sig); n != 0 {
						t.Fatalf("trial %d: %d registrations kept by an ended signal, want 0", i, n)
					}
					if signal.KeepsRegistry(sig) {
						t.Fatalf("trial %d: an ended signal keeps its registry", i)
					}
				}
			})
		}
	}
}

// A registration racing a loss is fired, whichever side takes the registry:
// once both calls have returned, a context made by the registration is
// cancelled with the loss, a merged signal is lost with it, an AfterLoss
// callback runs, and the lost signal keeps nothing; and a registration made
// before the race is fired by the time Lose returns, whoever took it.
func TestLoseRacingRegistrationsFiresAll(t *testing.T) {
	req, cancelReq := context.WithCancel(context.Background())
	defer cancelReq()
	contextFired := func(ctx context.Context) error {
		if got := context.Cause(ctx); !errors.Is(got, errRefused) {
			return fmt.Errorf("context.Cause = %v, want the loss", got)
		}
		return nil
	}
	registrations := []struct {
		name     string
		register func(sig *signal.Signal) (fired func() error)
	}{
		{"AfterLoss", func(sig *signal.Signal) func() error {
			ran := make(chan struct{})
			sig.AfterLoss(func() { close(ran) })
			return func() error {
				select {
				case <-ran:
					return nil
				case <-time.After(time.Minute):
					return errors.New("the AfterLoss callback never ran")
				}
			}
		}},
		{"Context of a request", func(sig *signal.Signal) func() error {
			ctx, _ := sig.Context(req)
			return func() error { return contextFired(ctx) }
		}},
		{"Context of Background", func(sig *signal.Signal) func() error {
			ctx, _ := sig.Context(context.Background())
			return func() error { return contextFired(ctx) }
		}},
		{"Any", func(sig *signal.Signal) func() error {
			merged, _ := signal.Any(sig)
			return func() error {
				if got := merged.Err(); !errors.Is(got, errRefused) {
					return fmt.Errorf("merged Err() = %v, want the loss", got)
				}
				return nil
			}
		}},
	}
	// With an earlier registration, the racing one goes into a registry
	// that was there before; the Lose must still fire the earlier one
	// before it returns. On a spread registry, both go into shards of its
	// set, which the Lose walks after Done is closed.
	for _, earlier := range []string{"", " after an earlier context", " after an earlier context, on a spread registry"} {
		for _, r := range registrations {
			name := r.name + earlier
			t.Run(name, func(t *testing.T) {
				for i := range 10000 {
					c := controller.New("orders")
					sig := c.Signal()
					var first context.Context
					if earlier != "" {
						if strings.HasSuffix(earlier, "spread registry") {
							signal.Spread(sig)
						}
						first, _ = sig.Context(req)
					}
					var fired func() error
					var firstAtReturn error
					race(func() { fired = r.register(sig) }, func() {
						c.Lose(errRefused)
						if first != nil {
							firstAtReturn = contextFired(first)
						}
					})
					if firstAtReturn != nil {
						t.Fatalf("trial %d: the earlier context when Lose returned: %v", i, firstAtReturn)
					}
					if err := fired(); err != nil {
						t.Fatalf("trial %d: %v", i, err)
					}
					if signal.KeepsRegistry(sig) {
						t.Fatalf("trial %d: a lost signal keeps its registry", i)
					}
				}
			})
		}
	}
}

// A call that reports false because a Lose won returns only once the loss
// is complete: Done is closed, as after that Lose returned. Lose and End
// move the state without a lock, and a stop finds the state under the
// mutex, which the loss does not take: each must wait for a loss under way.
func TestFalseFindsLossComplete(t *testing.T) {
	calls := []struct {
		name string
		call func(c *controller.Controller, stop func() bool) bool
	}{
		{"End", func(c *controller.Controller, _ func() bool) bool { return c.End() }},
		{"Lose", func(c *controller.Controller, _ func() bool) bool { return c.Lose(errLater) }},
		{"stop", func(_ *controller.Controller, stop func() bool) bool { return stop() }},
	}
	for _, call := range calls {
		t.Run(call.name, func(t *testing.T) {
			for i := range 20000 {
				c := controller.New("orders")
				sig := c.Signal()
				done := sig.Done()
				stop := sig.AfterLoss(func() {})
				var ok, closed bool
				race(func() { c.Lose(errRefused) }, func() {
					ok = call.call(c, stop)
					closed = isClosed(done)
				})
				if !ok && !closed {
					t.Fatalf("trial %d: %s() = false with Done still open", i, call.name)
				}
			}
		})
	}
}
