package singleflight_test

// The behaviours of golang.org/x/sync/singleflight that this package keeps,
// after x/sync's own singleflight_test.go, without its sleeps: a test waits
// until its callers have joined a flight (Dups) instead.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/singleflight"
	"github.com/zukhruf/lease/signal"
)

// waitDups waits until n callers have joined the flight g holds for key.
func waitDups[V any](t *testing.T, g *singleflight.Group[V], key string, n int) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		if d, _ := g.Dups(key); d >= n {
			return
		}
		if time.Now().After(deadline) {
			d, ok := g.Dups(key)
			t.Fatalf("Dups(%q) = %d, %v after %v, want %d", key, d, ok, hangGuard, n)
		}
		runtime.Gosched()
	}
}

// recv receives from ch, failing the test if nothing comes within hangGuard.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("no %s after %v", what, hangGuard)
		panic("unreachable")
	}
}

func TestDo(t *testing.T) {
	someErr := errors.New("some error")
	for _, tc := range []struct {
		name string
		val  string
		err  error
	}{
		{"value", "bar", nil},
		{"error", "", someErr},
		{"value and error", "partial", someErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g singleflight.Group[string]
			v, err, shared := g.Do(context.Background(), "key", func(context.Context, *signal.Signal) (string, error) {
				return tc.val, tc.err
			})
			if v != tc.val || err != tc.err || shared {
				t.Errorf("Do = %q, %v, %v, want %q, %v, false", v, err, shared, tc.val, tc.err)
			}
		})
	}
}

func TestDoChan(t *testing.T) {
	var g singleflight.Group[string]
	res := recv(t, g.DoChan(context.Background(), "key", func(context.Context, *signal.Signal) (string, error) {
		return "bar", nil
	}), "result")
	if res != (singleflight.Result[string]{Val: "bar"}) {
		t.Errorf("DoChan sent %+v, want {Val:bar Err:<nil> Shared:false}", res)
	}
}

// TestDoDupSuppress: callers that come while a flight runs wait for it and
// share its result; fn runs once.
func TestDoDupSuppress(t *testing.T) {
	var g singleflight.Group[string]
	var calls atomic.Int32
	started := make(chan struct{})
	release := make(chan struct{})
	fn := func(context.Context, *signal.Signal) (string, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release
		return "bar", nil
	}

	const n = 10
	type result struct {
		v      string
		err    error
		shared bool
	}
	results := make(chan result, n)
	call := func() {
		v, err, shared := g.Do(context.Background(), "key", fn)
		results <- result{v, err, shared}
	}
	go call()
	recv(t, started, "start of fn")
	for range n - 1 {
		go call()
	}
	waitDups(t, &g, "key", n-1)
	close(release)
	for range n {
		if r := recv(t, results, "result of Do"); r != (result{"bar", nil, true}) {
			t.Errorf("Do = %q, %v, %v, want bar, <nil>, true", r.v, r.err, r.shared)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("fn ran %d times, want 1", got)
	}
}

// TestDoChanShared: a caller of DoChan that joins a flight started by Do, and
// the other way round, gets its result with Shared set, as every caller does.
func TestDoChanShared(t *testing.T) {
	for _, tc := range []struct {
		name       string
		firstIsDo  bool
		secondIsDo bool
	}{
		{"Do then DoChan", true, false},
		{"DoChan then Do", false, true},
		{"DoChan then DoChan", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g singleflight.Group[int]
			started, release := make(chan struct{}), make(chan struct{})
			fn := func(context.Context, *signal.Signal) (int, error) {
				close(started)
				<-release
				return 7, nil
			}
			call := func(isDo bool, f func(context.Context, *signal.Signal) (int, error)) <-chan singleflight.Result[int] {
				if !isDo {
					return g.DoChan(context.Background(), "key", f)
				}
				ch := make(chan singleflight.Result[int], 1)
				go func() {
					v, err, shared := g.Do(context.Background(), "key", f)
					ch <- singleflight.Result[int]{Val: v, Err: err, Shared: shared}
				}()
				return ch
			}
			first := call(tc.firstIsDo, fn)
			recv(t, started, "start of fn")
			second := call(tc.secondIsDo, func(context.Context, *signal.Signal) (int, error) {
				t.Error("the second caller's fn ran")
				return 0, nil
			})
			waitDups(t, &g, "key", 1)
			close(release)
			want := singleflight.Result[int]{Val: 7, Shared: true}
			for i, ch := range []<-chan singleflight.Result[int]{first, second} {
				if got := recv(t, ch, "result"); got != want {
					t.Errorf("caller %d got %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

// TestForgetXSync is x/sync's TestForget (golang/go#31420): once the first
// flight is forgotten, a second starts, and a third call joins the second,
// not the first, even after the first returned.
func TestForgetXSync(t *testing.T) {
	var g singleflight.Group[int]
	firstStarted, unblockFirst, firstFinished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		g.Do(context.Background(), "key", func(context.Context, *signal.Signal) (int, error) {
			close(firstStarted)
			<-unblockFirst
			close(firstFinished)
			return 1, nil
		})
	}()
	<-firstStarted
	g.Forget("key")

	unblockSecond := make(chan struct{})
	second := g.DoChan(context.Background(), "key", func(context.Context, *signal.Signal) (int, error) {
		<-unblockSecond
		return 2, nil
	})
	close(unblockFirst)
	<-firstFinished
	<-firstDone

	third := g.DoChan(context.Background(), "key", func(context.Context, *signal.Signal) (int, error) {
		return 3, nil
	})
	close(unblockSecond)
	recv(t, second, "second result")
	if r := recv(t, third, "third result"); r.Val != 2 {
		t.Errorf("the third call got %d, want 2, the second flight's result", r.Val)
	}
}

// crowd starts a flight on a new Group whose fn, once n callers of Do share
// it, ends with end (a panic, runtime.Goexit). It returns what each caller
// recovered, how many callers Do returned to, and the flight's signal after a
// Forget of its key.
func crowd(t *testing.T, n int, end func()) (recovered []any, returned int, sig *signal.Signal) {
	t.Helper()
	var g singleflight.Group[int]
	var leaseSig atomic.Pointer[signal.Signal]
	started, release := make(chan struct{}), make(chan struct{})
	fn := func(_ context.Context, sig *signal.Signal) (int, error) {
		leaseSig.Store(sig)
		close(started)
		<-release
		end()
		return 0, nil
	}
	rec := make(chan any, n)
	var ret atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { rec <- recover() }()
			g.Do(context.Background(), "key", fn)
			ret.Add(1)
		}()
		if i == 0 {
			recv(t, started, "start of fn")
		}
	}
	waitDups(t, &g, "key", n-1)
	close(release)
	wg.Wait()
	close(rec)
	for r := range rec {
		recovered = append(recovered, r)
	}
	g.Forget("key")
	return recovered, int(ret.Load()), leaseSig.Load()
}

// TestPanicDo: a panic in fn reaches every caller of the flight as a panic
// whose value is an error that wraps the panic's value, if an error, and
// names it (golang/go#41133). The panic ends the lease; it is no loss.
func TestPanicDo(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		value any
		is    error // what errors.Is must find in the recovered error
		text  string
	}{
		{"string", "invalid memory address or nil pointer dereference", nil, "invalid memory address"},
		{"error", boom, boom, "boom"},
		{"wrapped error", errors.Join(boom, os.ErrClosed), os.ErrClosed, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 5
			recovered, returned, sig := crowd(t, n, func() { panic(tc.value) })
			if returned != 0 || len(recovered) != n {
				t.Errorf("Do returned to %d of %d callers after a panic in fn, want none", returned, n)
			}
			for _, r := range recovered {
				err, ok := r.(error)
				if !ok {
					t.Fatalf("recovered %T %v, want an error", r, r)
				}
				if !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), "singleflight_test.TestPanicDo") {
					t.Errorf("recovered %q, want the panic's value %q and the stack of fn", err, tc.text)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("errors.Is(%v, %v) = false, want true", err, tc.is)
				}
			}
			if st := state(sig); st != "ended" {
				t.Errorf("after the panic and Forget, the lease is %s, want ended", st)
			}
		})
	}
}

// TestGoexitDo: runtime.Goexit in fn ends the goroutine of every caller of
// the flight, and Do returns to none of them; the lease ends.
func TestGoexitDo(t *testing.T) {
	const n = 5
	recovered, returned, sig := crowd(t, n, runtime.Goexit)
	if returned != 0 {
		t.Errorf("Do returned to %d callers after runtime.Goexit in fn, want 0", returned)
	}
	for _, r := range recovered {
		if r != nil {
			t.Errorf("a caller recovered %v after runtime.Goexit in fn, want nothing", r)
		}
	}
	if st := state(sig); st != "ended" {
		t.Errorf("after Goexit and Forget, the lease is %s, want ended", st)
	}
}

// The two crashes below happen in a child process: the test binary runs
// itself with TEST_PANIC_DOCHAN set to the test's name.

// TestPanicDoChan: a panic in fn under DoChan crashes the program, since no
// caller could recover it.
func TestPanicDoChan(t *testing.T) {
	if os.Getenv("TEST_PANIC_DOCHAN") == t.Name() {
		defer func() { recover() }()
		var g singleflight.Group[int]
		<-g.DoChan(context.Background(), "", func(context.Context, *signal.Signal) (int, error) {
			panic("Panicking in DoChan")
		})
		t.Fatalf("DoChan unexpectedly returned")
	}
	wantCrash(t, "Panicking in DoChan")
}

// TestPanicDoSharedByDoChan: a panic in a flight started by Do crashes the
// program when a caller of DoChan shares the flight.
func TestPanicDoSharedByDoChan(t *testing.T) {
	if os.Getenv("TEST_PANIC_DOCHAN") == t.Name() {
		blocked, unblock := make(chan struct{}), make(chan struct{})
		var g singleflight.Group[int]
		go func() {
			defer func() { recover() }()
			g.Do(context.Background(), "", func(context.Context, *signal.Signal) (int, error) {
				close(blocked)
				<-unblock
				panic("Panicking in Do")
			})
		}()
		<-blocked
		ch := g.DoChan(context.Background(), "", func(context.Context, *signal.Signal) (int, error) {
			panic("DoChan unexpectedly executed callback")
		})
		close(unblock)
		<-ch
		t.Fatalf("DoChan unexpectedly returned")
	}
	wantCrash(t, "Panicking in Do")
}

// wantCrash runs the test again in a child process and requires it to crash
// with want in its output.
func wantCrash(t *testing.T, want string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), "TEST_PANIC_DOCHAN="+t.Name())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), &out)
	if err == nil {
		t.Errorf("the child passed; want a crash from the panic in fn")
	}
	if bytes.Contains(out.Bytes(), []byte("unexpectedly")) {
		t.Errorf("the child failed another way")
	}
	if !bytes.Contains(out.Bytes(), []byte(want)) {
		t.Errorf("the child's crash does not name %q", want)
	}
}
