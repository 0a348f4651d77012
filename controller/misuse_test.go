package controller_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

// nilPointer stands for the panic of a method called on a nil pointer: a
// runtime error, as for any method of sync.Mutex or of a nil *bytes.Buffer.
const nilPointer = "runtime error: invalid memory address or nil pointer dereference"

// TestMisuse calls every exported function and method with nil, zero and
// empty inputs, on zero values and on nil receivers, and checks the
// outcome the docs give: a working default, or a panic that names the call.
func TestMisuse(t *testing.T) {
	var (
		nilController *controller.Controller
		nilSignal     *signal.Signal
		nilParent     context.Context // a variable, not a literal: the call under test is the misuse
	)
	lostLease := func() *signal.Signal { c := controller.New("orders"); c.Lose(nil); return c.Signal() }
	endedLease := func() *signal.Signal { c := controller.New("orders"); c.End(); return c.Signal() }

	tests := []struct {
		name      string
		call      func(t *testing.T)
		wantPanic string // "" when the call must not panic
	}{
		// controller.New and the zero Controller
		{name: `New("") is a live lease on ""`, call: func(t *testing.T) {
			c := controller.New("")
			if got := c.Subject(); got != "" {
				t.Errorf("Subject() = %q, want %q", got, "")
			}
			if got, want := c.String(), `controller.Controller("", live)`; got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
			if !c.Lose(nil) {
				t.Fatal("Lose(nil) = false, want true")
			}
			if got, want := c.Signal().Err().Error(), "lease lost"; got != want {
				t.Errorf("Err().Error() = %q, want %q", got, want)
			}
		}},
		{name: `New("") is the zero Controller`, call: func(t *testing.T) {
			var zero controller.Controller
			made := controller.New("")
			if got, want := zero.String(), made.String(); got != want {
				t.Errorf("zero String() = %q, New(\"\") String() = %q", got, want)
			}
			for _, step := range []struct {
				name string
				do   func(*controller.Controller) bool
			}{
				{"Lose", func(c *controller.Controller) bool { return c.Lose(errSoak) }},
				{"End", func(c *controller.Controller) bool { return c.End() }},
				{"Lose", func(c *controller.Controller) bool { return c.Lose(nil) }},
			} {
				if got, want := step.do(&zero), step.do(made); got != want {
					t.Errorf("%s: zero Controller returned %v, New(\"\") returned %v", step.name, got, want)
				}
				if got, want := zero.String(), made.String(); got != want {
					t.Errorf("after %s: zero String() = %q, New(\"\") String() = %q", step.name, got, want)
				}
			}
			var le *lost.Error
			if !errors.As(zero.Signal().Err(), &le) || le.Subject() != "" || !errors.Is(le, errSoak) {
				t.Errorf("zero Controller after Lose: Err() = %v, want a *lost.Error on \"\" wrapping %v", zero.Signal().Err(), errSoak)
			}
		}},
		{name: "zero Controller ends", call: func(t *testing.T) {
			var c controller.Controller
			if !c.End() || c.Lose(errSoak) || c.Signal().Err() != nil {
				t.Errorf("zero Controller: End, then Lose, then Err() = %v; want ended and never lost", c.Signal().Err())
			}
		}},
		{name: "Lose(nil) loses with no cause", call: func(t *testing.T) {
			c := controller.New("orders")
			c.Lose(nil)
			var le *lost.Error
			if !errors.As(c.Signal().Err(), &le) || le.Unwrap() != nil {
				t.Errorf("Err() = %v, want a *lost.Error with no cause", c.Signal().Err())
			}
		}},
		{name: "nil *Controller Lose", call: func(t *testing.T) { nilController.Lose(errSoak) }, wantPanic: nilPointer},
		{name: "nil *Controller End", call: func(t *testing.T) { nilController.End() }, wantPanic: nilPointer},
		{name: "nil *Controller Subject", call: func(t *testing.T) { nilController.Subject() }, wantPanic: nilPointer},
		{name: "nil *Controller String", call: func(t *testing.T) { _ = nilController.String() }, wantPanic: nilPointer},
		// Signal would only convert the pointer; it panics at once instead of
		// handing the holder a nil signal.
		{name: "nil *Controller Signal", call: func(t *testing.T) { nilController.Signal() }, wantPanic: "controller: Signal called on a nil *Controller"},

		// The zero Signal: live, on "", never lost.
		{name: "zero Signal", call: func(t *testing.T) {
			var s signal.Signal
			if err := s.Err(); err != nil {
				t.Errorf("Err() = %v, want nil", err)
			}
			if d := s.Done(); closedNow(d) || d != s.Done() {
				t.Errorf("Done() is closed or not one channel")
			}
			if got, want := s.String(), `signal.Signal("", live)`; got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
			stop := s.AfterLoss(func() { t.Error("an AfterLoss callback of the zero Signal ran") })
			if first, second := stop(), stop(); !first || second {
				t.Errorf("stop(), stop() = %v, %v; want true, false", first, second)
			}
			ctx, cancel := s.Context(context.Background())
			if ctx.Err() != nil {
				t.Errorf("ctx.Err() = %v, want nil", ctx.Err())
			}
			cancel()
			cancel()
			if ctx.Err() != context.Canceled || context.Cause(ctx) != context.Canceled {
				t.Errorf("after cancel: ctx.Err() = %v, Cause = %v; want %v for both", ctx.Err(), context.Cause(ctx), context.Canceled)
			}
		}},
		{name: "nil *Signal Err", call: func(t *testing.T) { nilSignal.Err() }, wantPanic: nilPointer},
		{name: "nil *Signal Done", call: func(t *testing.T) { nilSignal.Done() }, wantPanic: nilPointer},
		{name: "nil *Signal AfterLoss", call: func(t *testing.T) { nilSignal.AfterLoss(func() {}) }, wantPanic: nilPointer},
		{name: "nil *Signal Context", call: func(t *testing.T) { nilSignal.Context(context.Background()) }, wantPanic: nilPointer},
		{name: "nil *Signal String", call: func(t *testing.T) { _ = nilSignal.String() }, wantPanic: nilPointer},
		{name: "nil *Signal AfterLoss(nil) names the call", call: func(t *testing.T) { nilSignal.AfterLoss(nil) }, wantPanic: "signal: AfterLoss called with a nil func"},
		{name: "nil *Signal Context(nil) names the call", call: func(t *testing.T) { nilSignal.Context(nilParent) }, wantPanic: "signal: Context called with a nil parent"},

		// AfterLoss(nil) and Context(nil) panic at once, whatever the state.
		{name: "AfterLoss(nil) on a live lease", call: func(t *testing.T) { controller.New("orders").Signal().AfterLoss(nil) }, wantPanic: "signal: AfterLoss called with a nil func"},
		{name: "AfterLoss(nil) on a lost lease", call: func(t *testing.T) { lostLease().AfterLoss(nil) }, wantPanic: "signal: AfterLoss called with a nil func"},
		{name: "AfterLoss(nil) on an ended lease", call: func(t *testing.T) { endedLease().AfterLoss(nil) }, wantPanic: "signal: AfterLoss called with a nil func"},
		{name: "AfterLoss(nil) on the zero Signal", call: func(t *testing.T) { new(signal.Signal).AfterLoss(nil) }, wantPanic: "signal: AfterLoss called with a nil func"},
		{name: "Context(nil) on a live lease", call: func(t *testing.T) { controller.New("orders").Signal().Context(nilParent) }, wantPanic: "signal: Context called with a nil parent"},
		{name: "Context(nil) on a lost lease", call: func(t *testing.T) { lostLease().Context(nilParent) }, wantPanic: "signal: Context called with a nil parent"},
		{name: "Context(nil) on an ended lease", call: func(t *testing.T) { endedLease().Context(nilParent) }, wantPanic: "signal: Context called with a nil parent"},
		{name: "Context(nil) on the zero Signal", call: func(t *testing.T) { new(signal.Signal).Context(nilParent) }, wantPanic: "signal: Context called with a nil parent"},

		// stop and cancel after the fact
		{name: "stop after the loss and again", call: func(t *testing.T) {
			c := controller.New("orders")
			ran := make(chan struct{})
			stop := c.Signal().AfterLoss(func() { close(ran) })
			c.Lose(nil)
			if first, second := stop(), stop(); first || second {
				t.Errorf("stop(), stop() after the loss = %v, %v; want false, false", first, second)
			}
			<-ran
		}},
		{name: "stop after End", call: func(t *testing.T) {
			c := controller.New("orders")
			stop := c.Signal().AfterLoss(func() { t.Error("callback ran after End") })
			c.End()
			if stop() {
				t.Error("stop() after End = true, want false")
			}
		}},

		// signal.Any
		{name: "Any of no signal is never lost", call: func(t *testing.T) {
			s, release := signal.Any()
			if s.Err() != nil || closedNow(s.Done()) {
				t.Errorf("Any(): Err() = %v, want live", s.Err())
			}
			release()
			release()
		}},
		{name: "Any of the zero Signal", call: func(t *testing.T) {
			s, release := signal.Any(new(signal.Signal))
			defer release()
			if s.Err() != nil {
				t.Errorf("Err() = %v, want nil", s.Err())
			}
		}},
		{name: "Any(nil) names the call", call: func(t *testing.T) { signal.Any(nilSignal) }, wantPanic: "signal: Any called with a nil *Signal"},
		{name: "Any with a nil among signals names the call", call: func(t *testing.T) {
			signal.Any(controller.New("orders").Signal(), nilSignal)
		}, wantPanic: "signal: Any called with a nil *Signal"},

		// A nil *lost.Error is not an error of the package: its methods panic.
		{name: "nil *lost.Error Error", call: func(t *testing.T) { _ = (*lost.Error)(nil).Error() }, wantPanic: nilPointer},
		{name: "nil *lost.Error Subject", call: func(t *testing.T) { _ = (*lost.Error)(nil).Subject() }, wantPanic: nilPointer},
		{name: "nil *lost.Error Unwrap", call: func(t *testing.T) { _ = (*lost.Error)(nil).Unwrap() }, wantPanic: nilPointer},
		{name: "nil *lost.Error LogValue", call: func(t *testing.T) { _ = (*lost.Error)(nil).LogValue() }, wantPanic: nilPointer},

		// lost.New with empty inputs
		{name: `lost.New("", nil)`, call: func(t *testing.T) {
			e := lost.New("", nil)
			if e.Error() != "lease lost" || e.Subject() != "" || e.Unwrap() != nil {
				t.Errorf("lost.New(\"\", nil): Error() = %q, Subject() = %q, Unwrap() = %v", e.Error(), e.Subject(), e.Unwrap())
			}
			var buf bytes.Buffer
			slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: dropTime})).Info("x", "err", e)
			if got, want := buf.String(), "level=INFO msg=x err.subject=\"\"\n"; got != want {
				t.Errorf("logged %q, want %q", got, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				switch {
				case r == nil && tt.wantPanic != "":
					t.Errorf("no panic, want %q", tt.wantPanic)
				case r == nil:
				case tt.wantPanic == "":
					t.Errorf("panic %v, want none", r)
				default:
					if got := panicMessage(r); got != tt.wantPanic {
						t.Errorf("panic %q, want %q", got, tt.wantPanic)
					}
				}
			}()
			tt.call(t)
		})
	}
}

func panicMessage(r any) string {
	switch v := r.(type) {
	case runtime.Error:
		return v.Error()
	case string:
		return v
	case error:
		return "error: " + v.Error()
	}
	return "?"
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// goTool returns the go command that runs this test, for the tests that
// run go vet.
func goTool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to run go vet: %v", err)
	}
	return path
}

// TestVetReportsCopies runs go vet on a program that copies a used
// Controller and a used Signal: the noCopy fields must make vet's copylocks
// check report both.
func TestVetReportsCopies(t *testing.T) {
	cmd := exec.Command(goTool(t), "vet", "./testdata/copylocks")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("go vet passed a program that copies a Controller and a Signal:\n%s", out)
	}
	for _, want := range []string{
		"assignment copies lock value to controllerCopy: github.com/zukhruf/lease/controller.Controller",
		"assignment copies lock value to signalCopy: github.com/zukhruf/lease/signal.Signal",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("go vet did not report %q; it said:\n%s", want, out)
		}
	}
}

// TestHolderCannotConvert builds a holder that converts its *signal.Signal,
// and a merged one from signal.Any, into controllers: the build must fail,
// and fail on each conversion and on nothing else, so that the split between
// holder and issuer cannot come back by accident.
func TestHolderCannotConvert(t *testing.T) {
	cmd := exec.Command(goTool(t), "build", "-o", os.DevNull, "./testdata/convert")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a holder that converts its signal into a controller compiled:\n%s", out)
	}
	want := []string{
		"cannot convert sig (variable of type *signal.Signal) to type *controller.Controller",
		"cannot convert merged (variable of type *signal.Signal) to type *controller.Controller",
		"cannot convert *sig (variable of struct type signal.Signal) to type controller.Controller",
	}
	var errs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(line, "#") {
			errs = append(errs, line)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("go build reported %d errors, want %d, one per conversion:\n%s", len(errs), len(want), out)
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Errorf("go build did not report %q; it said:\n%s", w, out)
		}
	}
}

// TestSignalMethods checks that a *signal.Signal has no method that changes
// the lease, so that no interface assertion reaches one either.
func TestSignalMethods(t *testing.T) {
	var got []string
	typ := reflect.TypeFor[*signal.Signal]()
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	if want := []string{"AfterLoss", "Context", "Done", "Err", "String"}; !slices.Equal(got, want) {
		t.Errorf("methods of *signal.Signal = %v, want %v", got, want)
	}
	var sig any = controller.New("orders").Signal()
	if _, ok := sig.(interface{ End() bool }); ok {
		t.Error("a *signal.Signal has End")
	}
	if _, ok := sig.(interface{ Lose(error) bool }); ok {
		t.Error("a *signal.Signal has Lose")
	}
}

const panicChildEnv = "LEASE_TEST_PANIC_IN"

// TestPanickingCallback checks that a panic in an AfterLoss callback ends
// the program as a panic in a context.AfterFunc callback does: it runs each
// in a child process and compares how they died.
func TestPanickingCallback(t *testing.T) {
	if which := os.Getenv(panicChildEnv); which != "" {
		panicInCallback(which)
		return
	}
	type death struct {
		code  int
		first string // the first line on stderr
		trace bool   // a goroutine trace follows
	}
	die := func(which string) death {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPanickingCallback$", "-test.count=1")
		cmd.Env = append(os.Environ(), panicChildEnv+"="+which)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("%s: the child did not die: %v\n%s", which, err, stderr.String())
		}
		first, _, _ := strings.Cut(stderr.String(), "\n")
		return death{code: exit.ExitCode(), first: first, trace: strings.Contains(stderr.String(), "\ngoroutine ")}
	}
	afterLoss, afterFunc := die("AfterLoss"), die("context.AfterFunc")
	if afterLoss != afterFunc {
		t.Errorf("a panicking AfterLoss callback died with %+v, a panicking context.AfterFunc callback with %+v", afterLoss, afterFunc)
	}
	if want := (death{code: 2, first: "panic: the callback failed", trace: true}); afterLoss != want {
		t.Errorf("a panicking AfterLoss callback died with %+v, want %+v", afterLoss, want)
	}
}

// panicInCallback is the child's part: a callback that panics, and a wait
// that only ends if the panic did not end the program.
func panicInCallback(which string) {
	switch which {
	case "AfterLoss":
		c := controller.New("orders")
		c.Signal().AfterLoss(func() { panic("the callback failed") })
		c.Lose(nil)
	case "context.AfterFunc":
		ctx, cancel := context.WithCancel(context.Background())
		context.AfterFunc(ctx, func() { panic("the callback failed") })
		cancel()
	}
	time.Sleep(hangGuard)
}
