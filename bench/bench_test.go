package bench_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/zukhruf/lease/bench/handrolled"
	"github.com/zukhruf/lease/bench/holder"
	"github.com/zukhruf/lease/bench/holder/viacontroller"
	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

// Every benchmark runs the lease and its peers as sub-benchmarks named
// impl=lease, impl=context and impl=handrolled, so that benchstat -col /impl
// sets them side by side.

var errCause = errors.New("the coordinator refused the claim")

// sink keeps results alive so that the compiler cannot drop the work.
var sink any

// ErrLive: a holder's loop checks Err before each unit of work on a live
// lease. The loop is in package holder, not inlined, with the check inlined
// into it, as in a holder's own code.
func BenchmarkErrLive(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		s := controller.New("bench").Signal()
		if holder.ErrLoopLease(s, b.N) != b.N {
			b.Fatal("lease lost")
		}
	})
	// The same loop in a holder that imports only package controller, where
	// TestInlining checks that the check is inlined as well.
	b.Run("impl=lease.viacontroller", func(b *testing.B) {
		b.ReportAllocs()
		c := controller.New("bench")
		if viacontroller.ErrLoop(c, b.N) != b.N {
			b.Fatal("lease lost")
		}
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		if holder.ErrLoopContext(ctx, b.N) != b.N {
			b.Fatal("context done")
		}
	})
	b.Run("impl=handrolled", func(b *testing.B) {
		b.ReportAllocs()
		s := handrolled.New()
		if holder.ErrLoopHandrolled(s, b.N) != b.N {
			b.Fatal("signal lost")
		}
	})
}

// ErrLost: every core asks Err of one lost lease at once, as all the
// goroutines of a holder do after the loss.
func BenchmarkErrLost(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		c := controller.New("bench")
		c.Lose(errCause)
		s := c.Signal()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if s.Err() == nil {
					panic("lease live")
				}
			}
		})
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errCause)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if ctx.Err() == nil {
					panic("context live")
				}
			}
		})
	})
	// context.Cause is what returns the reason, as the lease's Err does.
	b.Run("impl=context.Cause", func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errCause)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if context.Cause(ctx) == nil {
					panic("context live")
				}
			}
		})
	})
	b.Run("impl=handrolled", func(b *testing.B) {
		b.ReportAllocs()
		s := handrolled.New()
		s.Lose(errCause)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if s.Err() == nil {
					panic("signal live")
				}
			}
		})
	})
}

// DoneWarm: a holder's loop polls Done in a select, after the channel was
// made by an earlier call.
func BenchmarkDoneWarm(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		s := controller.New("bench").Signal()
		s.Done()
		if holder.DoneLoopLease(s, b.N) != b.N {
			b.Fatal("lease lost")
		}
	})
	b.Run("impl=lease.viacontroller", func(b *testing.B) {
		b.ReportAllocs()
		c := controller.New("bench")
		c.Signal().Done()
		if viacontroller.DoneLoop(c, b.N) != b.N {
			b.Fatal("lease lost")
		}
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		ctx.Done()
		if holder.DoneLoopContext(ctx, b.N) != b.N {
			b.Fatal("context done")
		}
	})
	b.Run("impl=handrolled", func(b *testing.B) {
		b.ReportAllocs()
		s := handrolled.New()
		if holder.DoneLoopHandrolled(s, b.N) != b.N {
			b.Fatal("signal lost")
		}
	})
}

// Lifecycle: an issuer grants a lease, the holder checks it once, and the
// holder releases it, as around every lock of a mutex.
func BenchmarkLifecycle(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := controller.New("bench")
			if c.Signal().Err() != nil {
				b.Fatal("lease lost")
			}
			c.End()
		}
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithCancelCause(context.Background())
			if ctx.Err() != nil {
				b.Fatal("context done")
			}
			cancel(nil)
		}
	})
	b.Run("impl=handrolled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := handrolled.New()
			if s.Err() != nil {
				b.Fatal("signal lost")
			}
			s.End()
		}
	})
}

// Loss: a lease is granted, waited on, lost with a cause, and the holder
// reads the reason.
func BenchmarkLoss(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := controller.New("bench")
			s := c.Signal()
			done := s.Done()
			c.Lose(errCause)
			<-done
			if s.Err() == nil {
				b.Fatal("lease live")
			}
		}
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithCancelCause(context.Background())
			done := ctx.Done()
			cancel(errCause)
			<-done
			if context.Cause(ctx) == nil {
				b.Fatal("context live")
			}
		}
	})
	b.Run("impl=handrolled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := handrolled.New()
			done := s.Done()
			s.Lose(errCause)
			<-done
			if s.Err() == nil {
				b.Fatal("signal live")
			}
		}
	})
}

// AfterLoss: a holder registers clean-up on a live lease and stops it when
// its work is done; context's peer is context.AfterFunc.
func BenchmarkAfterLoss(b *testing.B) {
	f := func() { panic("called") }
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		s := controller.New("bench").Signal()
		for b.Loop() {
			stop := s.AfterLoss(f)
			if !stop() {
				b.Fatal("stop = false")
			}
		}
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		for b.Loop() {
			stop := context.AfterFunc(ctx, f)
			if !stop() {
				b.Fatal("stop = false")
			}
		}
	})
}

// Context: a holder derives a context from its lease for one call, with
// Background as the parent, and cancels it after. Two context peers: where
// the lease is itself a context, the call's context is context.WithCancel of
// it (impl=context.child); the merge that a context user writes for a
// separate signal is context.WithCancelCause for the call and
// context.AfterFunc to carry the signal's loss into it (impl=context).
func BenchmarkContext(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		s := controller.New("bench").Signal()
		for b.Loop() {
			ctx, cancel := s.Context(context.Background())
			sink = ctx
			cancel()
		}
	})
	b.Run("impl=context.child", func(b *testing.B) {
		b.ReportAllocs()
		leaseCtx, cancelLease := context.WithCancelCause(context.Background())
		defer cancelLease(nil)
		for b.Loop() {
			ctx, cancel := context.WithCancel(leaseCtx)
			sink = ctx
			cancel()
		}
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		sig, cancelSig := context.WithCancelCause(context.Background())
		defer cancelSig(nil)
		for b.Loop() {
			ctx, cancel := context.WithCancelCause(context.Background())
			stop := context.AfterFunc(sig, func() { cancel(context.Cause(sig)) })
			sink = ctx
			stop()
			cancel(context.Canceled)
		}
	})
}

// ContextRequest: the common real case, sig.Context(r.Context()): a call's
// context made from a live request context and the lease, cancelled after
// the call. The request outlives the calls. The context way:
// context.WithCancelCause of the request for the call and context.AfterFunc
// on the lease's context to carry its loss into it.
func BenchmarkContextRequest(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		req, cancelReq := context.WithCancel(context.Background())
		defer cancelReq()
		s := controller.New("bench").Signal()
		for b.Loop() {
			ctx, cancel := s.Context(req)
			sink = ctx
			cancel()
		}
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		req, cancelReq := context.WithCancel(context.Background())
		defer cancelReq()
		sig, cancelSig := context.WithCancelCause(context.Background())
		defer cancelSig(nil)
		for b.Loop() {
			ctx, cancel := context.WithCancelCause(req)
			stop := context.AfterFunc(sig, func() { cancel(context.Cause(sig)) })
			sink = ctx
			stop()
			cancel(context.Canceled)
		}
	})
	// No comparison: context.WithCancelCause of the request and its cancel
	// alone, which both ways above pay: the floor under the lease's figure.
	b.Run("impl=floor", func(b *testing.B) {
		b.ReportAllocs()
		req, cancelReq := context.WithCancel(context.Background())
		defer cancelReq()
		for b.Loop() {
			ctx, cancel := context.WithCancelCause(req)
			sink = ctx
			cancel(context.Canceled)
		}
	})
}

// AnyRelease: a holder merges the signals of two long-lived leases for one
// piece of work and releases the merged signal after. The context way: a
// context.WithCancelCause and a context.AfterFunc on each lease's context,
// stopped after.
func BenchmarkAnyRelease(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		s1, s2 := controller.New("lock").Signal(), controller.New("leader").Signal()
		for b.Loop() {
			m, release := signal.Any(s1, s2)
			sink = m
			release()
		}
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		sig1, cancel1 := context.WithCancelCause(context.Background())
		defer cancel1(nil)
		sig2, cancel2 := context.WithCancelCause(context.Background())
		defer cancel2(nil)
		for b.Loop() {
			ctx, cancel := context.WithCancelCause(context.Background())
			stop1 := context.AfterFunc(sig1, func() { cancel(context.Cause(sig1)) })
			stop2 := context.AfterFunc(sig2, func() { cancel(context.Cause(sig2)) })
			sink = ctx
			stop1()
			stop2()
			cancel(context.Canceled)
		}
	})
}

// anySources is the number of sources AnyScale merges.
const anySources = 1000

// AnyScale: a signal merged from 1,000 sources, 999 long-lived and one new,
// and the new one lost; the holder sees the loss, and the 999 no longer hold
// a registration (TestAnyScaleLeavesSources in package signal checks that, and
// a flat heap). ns/source is the time per op over 1,000. The context
// way: a context.WithCancelCause and a context.AfterFunc on each source's
// context, the other 999 stopped after the loss.
func BenchmarkAnyScale(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		sigs := make([]*signal.Signal, anySources)
		for i := range anySources - 1 {
			sigs[i] = controller.New("bench").Signal()
		}
		for b.Loop() {
			c := controller.New("bench")
			sigs[anySources-1] = c.Signal()
			m, release := signal.Any(sigs...)
			c.Lose(errCause)
			<-m.Done()
			if m.Err() == nil {
				b.Fatal("merged signal live")
			}
			release()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/anySources, "ns/source")
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		srcs := make([]context.Context, anySources)
		for i := range anySources - 1 {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			srcs[i] = ctx
		}
		stops := make([]func() bool, anySources)
		for b.Loop() {
			src, lose := context.WithCancelCause(context.Background())
			srcs[anySources-1] = src
			ctx, cancel := context.WithCancelCause(context.Background())
			for i, s := range srcs {
				stops[i] = context.AfterFunc(s, func() { cancel(context.Cause(s)) })
			}
			lose(errCause)
			<-ctx.Done()
			if context.Cause(ctx) == nil {
				b.Fatal("merged context live")
			}
			for _, stop := range stops {
				stop()
			}
			cancel(context.Canceled)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/anySources, "ns/source")
	})
}

const wakers = 10_000

// Wake: 10,000 goroutines wait on Done; the time is from the loss until the
// last of them has woken.
func BenchmarkWake(b *testing.B) {
	stacks := make([]byte, 64<<20)
	wake := func(b *testing.B, newSignal func() (done func() <-chan struct{}, lose func())) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			done, lose := newSignal()
			var started, woke sync.WaitGroup
			started.Add(wakers)
			woke.Add(wakers)
			for range wakers {
				go func() {
					ch := done()
					started.Done()
					<-ch
					woke.Done()
				}()
			}
			started.Wait()
			waitParked(wakers, stacks)
			b.StartTimer()
			lose()
			woke.Wait()
		}
	}
	b.Run("impl=lease", func(b *testing.B) {
		wake(b, func() (func() <-chan struct{}, func()) {
			c := controller.New("bench")
			return c.Signal().Done, func() { c.Lose(errCause) }
		})
	})
	b.Run("impl=context", func(b *testing.B) {
		wake(b, func() (func() <-chan struct{}, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx.Done, func() { cancel(errCause) }
		})
	})
	b.Run("impl=handrolled", func(b *testing.B) {
		wake(b, func() (func() <-chan struct{}, func()) {
			s := handrolled.New()
			return s.Done, func() { s.Lose(errCause) }
		})
	})
}

// waitParked returns once at least n goroutines are parked in a channel
// receive, as the goroutine dump shows them, so that Wake times only the
// wake-up of sleeping waiters and not the last of them reaching the receive.
// buf holds the dump.
func waitParked(n int, buf []byte) {
	for {
		dump := buf[:runtime.Stack(buf, true)]
		if bytes.Count(dump, []byte(" [chan receive")) >= n {
			return
		}
		runtime.Gosched()
	}
}

const held = 1_000_000

// Memory: the heap that 1,000,000 live leases take, held at once, per lease.
// For a context, holding a lease means keeping the context and its cancel
// func. Nothing has called Done.
func BenchmarkMemory(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		cs := make([]*controller.Controller, held)
		memory(b, func() {
			for i := range cs {
				cs[i] = controller.New("bench")
			}
		}, func() { clear(cs) })
	})
	b.Run("impl=context", func(b *testing.B) {
		ctxs := make([]context.Context, held)
		cancels := make([]context.CancelCauseFunc, held)
		memory(b, func() {
			for i := range ctxs {
				ctxs[i], cancels[i] = context.WithCancelCause(context.Background())
			}
		}, func() { clear(ctxs); clear(cancels) })
	})
	b.Run("impl=handrolled", func(b *testing.B) {
		ss := make([]*handrolled.Signal, held)
		memory(b, func() {
			for i := range ss {
				ss[i] = handrolled.New()
			}
		}, func() { clear(ss) })
	})
}

// memory reports the heap that fill adds, per lease, as B/lease. The slices
// that hold the leases are made before, so they are not counted.
func memory(b *testing.B, fill, drop func()) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	var perLease float64
	for b.Loop() {
		b.StopTimer()
		drop()
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		fill()
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLease = float64(after.HeapAlloc-before.HeapAlloc) / held
		b.StartTimer()
	}
	b.ReportMetric(perLease, "B/lease")
}

// AllocFloor is no comparison: it times one heap allocation of 64 bytes that
// hold pointers, the size of a lease, as the floor under Lifecycle.
func BenchmarkAllocFloor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sink = new([8]*int)
	}
}
