package singleflight

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/core"
	"github.com/zukhruf/lease/signal"
)

// ErrForgotten is the cause of the loss of a flight's lease when
// [Group.Forget] forgot the flight: a newer flight for the same key may run.
// A flight's [signal.Signal.Err] then returns a
// *[github.com/zukhruf/lease/lost.Error] whose subject is the key and for
// which errors.Is(err, ErrForgotten) is true.
var ErrForgotten = errors.New("singleflight: flight forgotten")

// errGoexit reports that fn called runtime.Goexit.
var errGoexit = errors.New("singleflight: runtime.Goexit was called")

// A panicError is a value recovered from a panic in fn, with the stack trace
// of the panic. Its message starts with the value, as x/sync's does, so that a
// crash reads as the panic in fn.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string {
	return fmt.Sprintf("%v\n\n%s", p.value, p.stack)
}

// Unwrap returns the value of the panic when it is an error.
func (p *panicError) Unwrap() error {
	err, _ := p.value.(error)
	return err
}

func newPanicError(v any) error {
	stack := debug.Stack()
	// The first line, "goroutine N [status]:", is stale by the time the
	// panic reaches a caller of Do.
	if line := bytes.IndexByte(stack, '\n'); line >= 0 {
		stack = stack[line+1:]
	}
	return &panicError{value: v, stack: stack}
}

// A call is a flight: one run of fn and the callers that share its result.
// It holds its lease, so that a flight is one allocation, as x/sync's is.
type call[V any] struct {
	ctx flightContext // what fn gets as its context, with the flight's lease

	wg sync.WaitGroup

	// Written once before wg is done, read only after.
	val V
	err error

	// Guarded by the Group's mutex before wg is done; read-only after.
	dups  int
	chans []chan<- Result[V]
}

// A signal.Signal is a core.Lease and nothing more (package signal fails to
// compile otherwise, and so does this package), so a *core.Lease converts
// to the *signal.Signal that views it. Embedding the lease in the flight
// rather than allocating a controller.Controller buys one allocation of two
// per flight: BenchmarkDo in bench/singleflight, docs/benchmarks.md.
var _ = [1]struct{}{}[unsafe.Sizeof(signal.Signal{})-unsafe.Sizeof(core.Lease{})]

// sig returns the holder's view of c's lease.
func (c *call[V]) sig() *signal.Signal { return (*signal.Signal)(unsafe.Pointer(&c.ctx.lease)) }

// Group is a namespace of keys in which each key has, at a time, at most one
// flight that new callers join, and at most one flight whose lease is live:
// the same one. A forgotten flight runs on with its lease lost.
//
// The zero Group is empty and ready to use. A Group must not be copied after
// first use.
//
// In the terminology of [the Go memory model], the return of fn
// “synchronizes before” the return of every Do and every receive from DoChan
// that gets its result; and a Forget that forgets a flight “synchronizes
// before” every Err of that flight's signal that returns the loss, and before
// the start of every newer flight for the key.
//
// [the Go memory model]: https://go.dev/ref/mem
type Group[V any] struct {
	// Observer, if not nil, is told of each flight's lease: granted when
	// the flight starts, lost (via [health.Push]) when it is forgotten,
	// released when fn returns. It must not be changed after first use.
	Observer health.Observer

	mu sync.Mutex          // guards m, and each call's dups and chans
	m  map[string]*call[V] // made at the first call
}

// Result holds the results of Do, so they can be passed on a channel.
type Result[V any] struct {
	Val    V
	Err    error
	Shared bool
}

// Do executes and returns the results of fn, making sure that only one
// execution is in flight for a given key at a time. If a duplicate comes in,
// the duplicate caller waits for the original to complete and receives the
// same results. The return value shared reports whether v was given to more
// than one caller.
//
// fn runs under a lease on key, in the goroutine of the caller that started
// the flight. Its context is a copy of that caller's ctx, as
// sig.Context(ctx) ([signal.Signal.Context]) would make it, made when fn
// first uses it: it is done when ctx is done, when the lease is lost (with
// the loss as its cause), or once fn has returned. The contexts of the callers
// that join the flight are not consulted, as with x/sync; a caller that must
// stop waiting when its own context is done uses DoChan in a select.
// The lease ends, never lost, when fn returns, so Do never reports a loss by
// itself: a flight forgotten by [Group.Forget] learns of it from sig and from
// its context, and decides what to return.
//
// Callers that joined a flight before it was forgotten still get its result,
// as with x/sync. If fn returns the loss (as fn does that checks sig.Err()
// before its write), err is that *lost.Error and errors.Is(err, ErrForgotten)
// holds: the caller may call Do again to join the newer flight. A value a
// forgotten flight returned without an error is what it had read before it
// was forgotten; a caller that must not use such a value checks for the loss
// in fn, not after Do.
//
// If fn panics, every caller of the flight panics with an error that wraps
// the panic's value when it is an error, and carries the stack of the panic.
// If fn calls runtime.Goexit, every caller of the flight exits its goroutine
// too.
//
// Do panics if ctx or fn is nil.
func (g *Group[V]) Do(ctx context.Context, key string, fn func(ctx context.Context, sig *signal.Signal) (V, error)) (v V, err error, shared bool) {
	if ctx == nil {
		panic("singleflight: Do called with a nil context")
	}
	if fn == nil {
		panic("singleflight: Do called with a nil func")
	}
	g.mu.Lock()
	if c, ok := g.m[key]; ok {
		c.dups++
		g.mu.Unlock()
		c.wg.Wait()
		if e, ok := c.err.(*panicError); ok {
			panic(e)
		} else if c.err == errGoexit {
			runtime.Goexit()
		}
		return c.val, c.err, true
	}
	c := g.start(ctx, key)
	g.mu.Unlock()
	g.granted(key)

	g.doCall(c, key, fn)
	return c.val, c.err, c.dups > 0
}

// DoChan is like Do but returns a channel that will receive the results when
// they are ready. fn runs in a goroutine of its own.
//
// The returned channel will not be closed. If fn panics, the program crashes,
// as with x/sync: no caller could recover the panic.
//
// DoChan panics if ctx or fn is nil.
func (g *Group[V]) DoChan(ctx context.Context, key string, fn func(ctx context.Context, sig *signal.Signal) (V, error)) <-chan Result[V] {
	if ctx == nil {
		panic("singleflight: DoChan called with a nil context")
	}
	if fn == nil {
		panic("singleflight: DoChan called with a nil func")
	}
	ch := make(chan Result[V], 1)
	g.mu.Lock()
	if c, ok := g.m[key]; ok {
		c.dups++
		c.chans = append(c.chans, ch)
		g.mu.Unlock()
		return ch
	}
	c := g.start(ctx, key)
	c.chans = []chan<- Result[V]{ch}
	g.mu.Unlock()
	g.granted(key)

	go g.doCall(c, key, fn)
	return ch
}

// Forget tells the Group to forget about a key. Future calls to Do for this
// key will call fn rather than waiting for an earlier call to complete.
//
// If a flight for key is running, its lease is lost with [ErrForgotten]
// before any newer flight for key can start: from then on its sig.Err()
// returns the loss and sig.Done() is closed. The contexts of the flight (the
// one fn was given, those made from it, and those made by sig.Context) are
// cancelled after that, outside the Group's lock, so that a flight with a
// large tree of contexts holds up no call on another key; Forget returns
// once all are cancelled. A newer flight may start meanwhile. The flight
// keeps running until its fn returns, and its callers get its result. A
// flight whose fn returned before Forget was called is never lost.
//
// A call of Forget(key) inside fn, a common use of x/sync's Forget that
// lets the next caller start afresh while this flight finishes, forgets fn's
// own flight: fn's lease is lost, its context is cancelled, and a fn that
// checks sig.Err() before its write finds the loss
// ([ExampleGroup_Forget_insideFn]).
func (g *Group[V]) Forget(key string) {
	g.mu.Lock()
	c, ok := g.m[key]
	if !ok {
		g.mu.Unlock()
		return
	}
	delete(g.m, key)
	// Under the mutex, so that no flight for key starts before the loss
	// shows; LoseFirst closes Done and runs no code of the holder's.
	lost := c.ctx.lease.LoseFirst(ErrForgotten)
	g.mu.Unlock()
	if testHookForgetUnlocked != nil {
		testHookForgetUnlocked()
	}
	if lost {
		c.ctx.lose(c.ctx.lease.Err())
		c.ctx.lease.FireLoss()
		g.lost(key, c.ctx.lease.Err())
	}
}

// testHookForgetUnlocked, when set by a test, runs in Forget after it let go
// of the Group's mutex and before it cancels the forgotten flight's contexts.
var testHookForgetUnlocked func()

// start grants a new flight for key its lease and puts it in the Group.
// g.mu must be held.
func (g *Group[V]) start(ctx context.Context, key string) *call[V] {
	if g.m == nil {
		g.m = make(map[string]*call[V])
	}
	c := new(call[V])
	c.ctx.lease.Init(key)
	c.ctx.parent = ctx
	c.wg.Add(1)
	g.m[key] = c
	return c
}

// doCall runs fn for the flight c.
func (g *Group[V]) doCall(c *call[V], key string, fn func(context.Context, *signal.Signal) (V, error)) {
	normalReturn := false
	recovered := false

	// A double defer tells a panic from runtime.Goexit, as x/sync does
	// (https://golang.org/cl/134395).
	defer func() {
		// fn is over: from here on a Forget finds the lease ended, and the
		// flight is never lost.
		if c.ctx.lease.End() {
			g.released(key)
		}
		c.ctx.finish()
		if !normalReturn && !recovered {
			c.err = errGoexit
		}

		g.mu.Lock()
		defer g.mu.Unlock()
		c.wg.Done()
		if g.m[key] == c {
			delete(g.m, key)
		}

		if e, ok := c.err.(*panicError); ok {
			// A panic that a caller of DoChan waits for must not be
			// recovered, or that caller would wait for ever.
			if len(c.chans) > 0 {
				go panic(e)
				select {} // keep this goroutine in the crash dump
			}
			panic(e)
		} else if c.err == errGoexit {
			// The goroutine is already exiting.
		} else {
			for _, ch := range c.chans {
				ch <- Result[V]{c.val, c.err, c.dups > 0}
			}
		}
	}()

	func() {
		defer func() {
			if !normalReturn {
				// The stack of the panic is only here; whether it was a
				// panic or a Goexit is known only once recover returns.
				if r := recover(); r != nil {
					c.err = newPanicError(r)
				}
			}
		}()
		c.val, c.err = fn(&c.ctx, c.sig())
		normalReturn = true
	}()

	if !normalReturn {
		recovered = true
	}
}
