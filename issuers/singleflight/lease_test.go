package singleflight_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/singleflight"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

// flight is one run of fn that a test holds: what fn got, and the way to
// make it return.
type flight struct {
	ctx     context.Context
	sig     *signal.Signal
	release chan int // the value fn returns; fn returns sig.Err() with it
}

// start starts a flight for key with DoChan and waits until fn runs.
func start(t *testing.T, g *singleflight.Group[int], ctx context.Context, key string) (*flight, <-chan singleflight.Result[int]) {
	t.Helper()
	started := make(chan *flight, 1)
	ch := g.DoChan(ctx, key, func(ctx context.Context, sig *signal.Signal) (int, error) {
		f := &flight{ctx: ctx, sig: sig, release: make(chan int)}
		started <- f
		return <-f.release, sig.Err()
	})
	return recv(t, started, "start of fn"), ch
}

// wantForgotten checks that err is the loss of a lease on key by Forget.
func wantForgotten(t *testing.T, err error, key string) {
	t.Helper()
	var le *lost.Error
	if !errors.As(err, &le) || le.Subject() != key || !errors.Is(err, singleflight.ErrForgotten) {
		t.Errorf("err = %v, want a *lost.Error on %q with cause ErrForgotten", err, key)
	}
}

// TestForgetLosesFlight: Forget loses the running flight's lease, once, with
// ErrForgotten, and cuts its context, while the newer flight for the key runs
// live; each flight's callers get that flight's result.
func TestForgetLosesFlight(t *testing.T) {
	var g singleflight.Group[int]
	ctx := context.Background()
	a, aFirst := start(t, &g, ctx, "key")
	aJoined := g.DoChan(ctx, "key", func(context.Context, *signal.Signal) (int, error) {
		t.Error("a caller that joined flight A ran fn")
		return 0, nil
	})
	// A context made from A's before the loss, as a call made by fn is.
	call, cancelCall := context.WithCancel(a.ctx)
	defer cancelCall()

	if err := a.sig.Err(); err != nil {
		t.Fatalf("before Forget, A's sig.Err() = %v, want nil", err)
	}
	g.Forget("key")
	aErr := a.sig.Err()
	wantForgotten(t, aErr, "key")
	for name, c := range map[string]context.Context{"fn's context": a.ctx, "a call's context": call} {
		select {
		case <-c.Done():
		default:
			t.Errorf("after Forget, %s is not done", name)
		}
		if cause := context.Cause(c); cause != aErr {
			t.Errorf("context.Cause(%s) = %v, want A's loss %v", name, cause, aErr)
		}
	}

	b, bCh := start(t, &g, ctx, "key")
	if err := b.sig.Err(); err != nil {
		t.Errorf("flight B started after Forget: sig.Err() = %v, want nil", err)
	}
	if err := b.ctx.Err(); err != nil {
		t.Errorf("flight B's ctx.Err() = %v, want nil", err)
	}
	bJoined := g.DoChan(ctx, "key", func(context.Context, *signal.Signal) (int, error) {
		t.Error("a caller that joined flight B ran fn")
		return 0, nil
	})
	waitDups(t, &g, "key", 1)

	// A returns while B runs: its callers get its result and its loss; B is
	// untouched.
	a.release <- 1
	for _, ch := range []<-chan singleflight.Result[int]{aFirst, aJoined} {
		r := recv(t, ch, "A's result")
		if r.Val != 1 || r.Err != aErr || !r.Shared {
			t.Errorf("A's caller got %+v, want {1 %v true}", r, aErr)
		}
	}
	if err := b.sig.Err(); err != nil {
		t.Errorf("after A returned, B's sig.Err() = %v, want nil", err)
	}

	// Forgetting B loses B and leaves A's loss as it was: lost once.
	g.Forget("key")
	g.Forget("key")
	wantForgotten(t, b.sig.Err(), "key")
	if err := a.sig.Err(); err != aErr {
		t.Errorf("after B was forgotten, A's sig.Err() = %v, want the same error value %v", err, aErr)
	}
	b.release <- 2
	for _, ch := range []<-chan singleflight.Result[int]{bCh, bJoined} {
		if r := recv(t, ch, "B's result"); r.Val != 2 || !r.Shared {
			t.Errorf("B's caller got %+v, want Val 2, Shared", r)
		}
	}
}

// TestReturnBeforeForgetNeverLost: a flight whose fn returned before Forget
// is never lost, whether Forget comes before the Group dropped the flight or
// after, and a Forget of another key or of no flight loses nothing.
func TestReturnBeforeForgetNeverLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forget string
		doChan bool
	}{
		{"Do, then Forget of the key", "key", false},
		{"DoChan, then Forget of the key", "key", true},
		{"Do, then Forget of another key", "other", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g singleflight.Group[int]
			var sig *signal.Signal
			var fnCtx context.Context
			fn := func(ctx context.Context, s *signal.Signal) (int, error) {
				sig, fnCtx = s, ctx
				return 1, s.Err()
			}
			if tc.doChan {
				if r := recv(t, g.DoChan(context.Background(), "key", fn), "result"); r.Err != nil {
					t.Fatalf("DoChan sent %+v, want no error", r)
				}
			} else if _, err, _ := g.Do(context.Background(), "key", fn); err != nil {
				t.Fatalf("Do = %v, want no error", err)
			}
			g.Forget(tc.forget)
			if err, st := sig.Err(), state(sig); err != nil || st != "ended" {
				t.Errorf("after Forget, sig.Err() = %v and the lease is %s, want nil and ended: the flight had returned", err, st)
			}
			// fn's context is over with fn, but not by a loss.
			if err, cause := fnCtx.Err(), context.Cause(fnCtx); err != context.Canceled || cause != context.Canceled {
				t.Errorf("after fn returned: ctx.Err() = %v, Cause = %v, want both context.Canceled", err, cause)
			}
		})
	}
}

// TestForgetWhileOtherKeyRuns: Forget loses only the flight of its key.
func TestForgetWhileOtherKeyRuns(t *testing.T) {
	var g singleflight.Group[int]
	a, aCh := start(t, &g, context.Background(), "a")
	b, bCh := start(t, &g, context.Background(), "b")
	g.Forget("a")
	wantForgotten(t, a.sig.Err(), "a")
	if err := b.sig.Err(); err != nil {
		t.Errorf("Forget(a) lost the flight of b: %v", err)
	}
	a.release <- 0
	b.release <- 0
	recv(t, aCh, "a's result")
	if r := recv(t, bCh, "b's result"); r.Err != nil {
		t.Errorf("b's result %+v, want no error", r)
	}
}

type ctxKey struct{}

// TestFlightContext: fn's context is sig.Context of the first caller's: the
// caller's values and deadline, done when the caller's is, with its cause;
// the later callers' contexts are not used.
func TestFlightContext(t *testing.T) {
	var g singleflight.Group[int]
	parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "first"))
	f, ch := start(t, &g, parent, "key")
	later, cancelLater := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "later"))
	joined := g.DoChan(later, "key", func(context.Context, *signal.Signal) (int, error) { return 0, nil })
	cancelLater()

	if v := f.ctx.Value(ctxKey{}); v != "first" {
		t.Errorf("fn's ctx.Value = %v, want the first caller's value", v)
	}
	if err := f.ctx.Err(); err != nil {
		t.Errorf("fn's ctx.Err() = %v after a later caller's context ended, want nil", err)
	}
	if _, ok := f.ctx.Deadline(); ok {
		t.Errorf("fn's ctx has a deadline, the caller's has none")
	}
	if s := f.ctx.(interface{ String() string }).String(); !strings.Contains(s, `"key", live`) {
		t.Errorf("fn's ctx prints as %s, want its lease", s)
	}
	stop := errors.New("the caller gave up")
	cancelParent(stop)
	<-f.ctx.Done()
	if cause := context.Cause(f.ctx); cause != stop {
		t.Errorf("context.Cause(fn's ctx) = %v, want the caller's cause %v", cause, stop)
	}
	if err := f.sig.Err(); err != nil {
		t.Errorf("the caller's context ended the lease: sig.Err() = %v", err)
	}
	f.release <- 3
	for _, ch := range []<-chan singleflight.Result[int]{ch, joined} {
		if r := recv(t, ch, "result"); r.Val != 3 {
			t.Errorf("result %+v, want Val 3", r)
		}
	}
}

// TestFlightContextMadeLate: fn's context answers the same whatever was asked
// of it first and whether it was asked before the loss, after it, or after
// fn returned (by a goroutine fn left behind).
func TestFlightContextMadeLate(t *testing.T) {
	asks := map[string]func(context.Context){
		"Err":        func(c context.Context) { _ = c.Err() },
		"Done":       func(c context.Context) { _ = c.Done() },
		"Value":      func(c context.Context) { _ = c.Value(ctxKey{}) },
		"WithCancel": func(c context.Context) { _, cancel := context.WithCancel(c); defer cancel() },
	}
	for name, ask := range asks {
		for _, when := range []string{"before the loss", "after the loss", "after fn returned"} {
			t.Run(name+" "+when, func(t *testing.T) {
				var g singleflight.Group[int]
				f, ch := start(t, &g, context.Background(), "key")
				if when == "before the loss" {
					ask(f.ctx)
				}
				if when != "after fn returned" {
					g.Forget("key")
				}
				if when == "after the loss" {
					ask(f.ctx)
				}
				f.release <- 0
				r := recv(t, ch, "result")
				if when == "after fn returned" {
					ask(f.ctx)
					if err, cause := f.ctx.Err(), context.Cause(f.ctx); err != context.Canceled || cause != context.Canceled {
						t.Errorf("ctx.Err() = %v, Cause = %v, want both context.Canceled", err, cause)
					}
					return
				}
				<-f.ctx.Done()
				if err, cause := f.ctx.Err(), context.Cause(f.ctx); err != context.Canceled || cause != r.Err {
					t.Errorf("ctx.Err() = %v, Cause = %v, want context.Canceled and the loss %v", err, cause, r.Err)
				}
				wantForgotten(t, r.Err, "key")
			})
		}
	}
}

// TestFlightContextChildStartsNoGoroutine: a context made from fn's context
// joins its children, as one made from sig.Context does, and the loss
// cancels it with the cause; no goroutine watches it.
func TestFlightContextChildStartsNoGoroutine(t *testing.T) {
	var g singleflight.Group[int]
	const n = 100
	flights := make([]*flight, n)
	results := make([]<-chan singleflight.Result[int], n)
	children := make([]context.Context, n)
	keys := make([]string, n)
	for i := range n {
		keys[i] = "key" + string(rune('A'+i%26)) + string(rune('a'+i/26))
		flights[i], results[i] = start(t, &g, context.Background(), keys[i])
	}
	before := runtime.NumGoroutine()
	for i, f := range flights {
		var cancel context.CancelFunc
		children[i], cancel = context.WithCancel(f.ctx)
		defer cancel()
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d contexts made from flights' contexts started %d goroutines, want none", n, after-before)
	}
	for i, f := range flights {
		g.Forget(keys[i])
		select {
		case <-children[i].Done():
		default:
			t.Fatalf("child %d not done when Forget returned", i)
		}
		if cause := context.Cause(children[i]); cause != f.sig.Err() {
			t.Errorf("Cause(child %d) = %v, want %v", i, cause, f.sig.Err())
		}
		f.release <- i
		recv(t, results[i], "result")
	}
}

// TestNeverLate: a flight started by a Do that races a Forget never finds
// the forgotten flight's lease live: the loss comes before the grant.
func TestNeverLate(t *testing.T) {
	trials := 2000
	if testing.Short() {
		trials = 200
	}
	var g singleflight.Group[int]
	for i := range trials {
		a, aCh := start(t, &g, context.Background(), "key")
		forgot, done := make(chan struct{}), make(chan struct{})
		var late bool
		go func() {
			defer close(forgot)
			g.Forget("key")
		}()
		go func() {
			defer close(done)
			// Joins A before the Forget, or starts B after it, while A runs.
			g.Do(context.Background(), "key", func(context.Context, *signal.Signal) (int, error) {
				late = a.sig.Err() == nil
				return 0, nil
			})
		}()
		<-forgot
		a.release <- 0
		recv(t, aCh, "A's result")
		<-done
		if late {
			t.Fatalf("trial %d: flight B started while flight A's lease was live", i)
		}
	}
}

// TestMisuse: nil arguments panic, naming the call.
func TestMisuse(t *testing.T) {
	var g singleflight.Group[int]
	var nilCtx context.Context
	fn := func(context.Context, *signal.Signal) (int, error) { return 0, nil }
	for _, tc := range []struct {
		name string
		call func()
		want string
	}{
		{"Do with a nil context", func() { g.Do(nilCtx, "k", fn) }, "singleflight: Do called with a nil context"},
		{"Do with a nil func", func() { g.Do(context.Background(), "k", nil) }, "singleflight: Do called with a nil func"},
		{"DoChan with a nil context", func() { g.DoChan(nilCtx, "k", fn) }, "singleflight: DoChan called with a nil context"},
		{"DoChan with a nil func", func() { g.DoChan(context.Background(), "k", nil) }, "singleflight: DoChan called with a nil func"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != tc.want {
					t.Errorf("panic(%v), want panic(%q)", r, tc.want)
				}
			}()
			tc.call()
		})
	}
}

// TestForgetCancelsOutsideTheLock: a Forget whose flight has many contexts
// holds up no call on another key while it cancels them, and the old
// flight's Err and Done show the loss before a newer flight for its key
// starts. The hook runs in Forget once it has let go of the mutex: no
// context may be cancelled yet, and a Do on another key and a new flight on
// the key itself run to their end before Forget goes on to cancel them.
func TestForgetCancelsOutsideTheLock(t *testing.T) {
	var g singleflight.Group[int]
	const contexts = 10_000
	ctxs := make([]context.Context, 0, contexts)
	running, finish := make(chan struct{}), make(chan struct{})
	var oldSig *signal.Signal
	old := g.DoChan(context.Background(), "key", func(ctx context.Context, sig *signal.Signal) (int, error) {
		oldSig = sig
		for i := range contexts {
			parent := ctx
			if i%2 == 0 {
				parent = context.Background()
			}
			c, _ := sig.Context(parent) // cancelled by the loss
			ctxs = append(ctxs, c)
		}
		close(running)
		<-finish
		return 1, sig.Err()
	})
	<-running

	others := make(chan error, 1)
	singleflight.SetForgetHook(func() {
		// Forget has let go of the mutex, and has not cancelled the
		// contexts yet: the cancellation is outside the mutex.
		for i, c := range ctxs {
			if c.Err() != nil {
				others <- fmt.Errorf("context %d was cancelled before Forget let go of the Group's mutex", i)
				return
			}
		}
		_, err, _ := g.Do(context.Background(), "other", func(context.Context, *signal.Signal) (int, error) { return 2, nil })
		if err == nil {
			_, err, _ = g.Do(context.Background(), "key", func(_ context.Context, sig *signal.Signal) (int, error) {
				// A newer flight for the key: the old one shows its loss.
				if !isClosed(oldSig.Done()) || !errors.Is(oldSig.Err(), singleflight.ErrForgotten) {
					return 0, errors.New("a newer flight started while the old flight's Err and Done showed no loss")
				}
				return 3, sig.Err()
			})
		}
		others <- err
	})
	defer singleflight.SetForgetHook(nil)
	forgotten := make(chan struct{})
	go func() {
		g.Forget("key")
		close(forgotten)
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Do on other keys waited for Forget to cancel the old flight's contexts")
	}
	<-forgotten
	for i, c := range ctxs {
		if !errors.Is(context.Cause(c), singleflight.ErrForgotten) {
			t.Fatalf("context %d when Forget returned: Cause() = %v, want the loss", i, context.Cause(c))
		}
	}
	close(finish)
	if r := <-old; !errors.Is(r.Err, singleflight.ErrForgotten) {
		t.Errorf("old flight: err = %v, want the loss", r.Err)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
