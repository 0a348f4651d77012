package scale_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

var errCause = errors.New("the coordinator refused the claim")

// The Scale benchmarks are what make bench-scale runs at every -cpu the
// machine has: the ops a server makes on one lease from every core at once.
// Each runs three ways side by side:
//
//   - impl=lease: every goroutine of b.RunParallel on one shared lease;
//   - impl=context: the same op written with package context, on one shared
//     context that stands for the lease;
//   - impl=limit: the lease's op with a lease per goroutine, so that nothing
//     is shared and only allocation and the runtime slow it as cores are
//     added: the most the shared lease can hope for.

// perGoroutine returns a fresh signal for each goroutine of RunParallel, and
// a func that ends them all once the benchmark is over.
func perGoroutine() (next func() *signal.Signal, end func()) {
	var mu sync.Mutex
	var cs []*controller.Controller
	next = func() *signal.Signal {
		c := controller.New("bench")
		mu.Lock()
		cs = append(cs, c)
		mu.Unlock()
		return c.Signal()
	}
	end = func() {
		for _, c := range cs {
			c.End()
		}
	}
	return next, end
}

// onLeaseAndLimit runs run on one lease that every goroutine shares
// (impl=lease) and on a lease per goroutine (impl=limit).
func onLeaseAndLimit(b *testing.B, run func(*testing.B, func() *signal.Signal)) {
	b.Run("impl=lease", func(b *testing.B) {
		c := controller.New("bench")
		defer c.End()
		run(b, c.Signal)
	})
	b.Run("impl=limit", func(b *testing.B) {
		next, end := perGoroutine()
		defer end()
		run(b, next)
	})
}

// ScaleContextRequest: sig.Context(req) and its cancel, each goroutine a
// request that outlives its calls. The context way:
// context.WithCancelCause(req) and context.AfterFunc on the lease's context.
func BenchmarkScaleContextRequest(b *testing.B) {
	run := func(b *testing.B, sig func() *signal.Signal) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req, cancelReq := context.WithCancel(context.Background())
			defer cancelReq()
			s := sig()
			for pb.Next() {
				ctx, cancel := s.Context(req)
				if ctx.Err() != nil {
					panic("context done")
				}
				cancel()
			}
		})
	}
	onLeaseAndLimit(b, run)
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		sig, cancelSig := context.WithCancelCause(context.Background())
		defer cancelSig(nil)
		b.RunParallel(func(pb *testing.PB) {
			req, cancelReq := context.WithCancel(context.Background())
			defer cancelReq()
			for pb.Next() {
				ctx, cancel := context.WithCancelCause(req)
				stop := context.AfterFunc(sig, func() { cancel(context.Cause(sig)) })
				if ctx.Err() != nil {
					panic("context done")
				}
				stop()
				cancel(context.Canceled)
			}
		})
	})
}

// ScaleContextBackground: sig.Context(context.Background()) and its cancel.
// The context way: context.WithCancel of the lease's context.
func BenchmarkScaleContextBackground(b *testing.B) {
	run := func(b *testing.B, sig func() *signal.Signal) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			s := sig()
			for pb.Next() {
				ctx, cancel := s.Context(context.Background())
				if ctx.Err() != nil {
					panic("context done")
				}
				cancel()
			}
		})
	}
	onLeaseAndLimit(b, run)
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		leaseCtx, cancelLease := context.WithCancelCause(context.Background())
		defer cancelLease(nil)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ctx, cancel := context.WithCancel(leaseCtx)
				if ctx.Err() != nil {
					panic("context done")
				}
				cancel()
			}
		})
	})
}

// ScaleAfterLoss: sig.AfterLoss(f) and its stop. The context way:
// context.AfterFunc on the lease's context.
func BenchmarkScaleAfterLoss(b *testing.B) {
	f := func() { panic("called") }
	run := func(b *testing.B, sig func() *signal.Signal) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			s := sig()
			for pb.Next() {
				if !s.AfterLoss(f)() {
					panic("stop = false")
				}
			}
		})
	}
	onLeaseAndLimit(b, run)
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		leaseCtx, cancelLease := context.WithCancelCause(context.Background())
		defer cancelLease(nil)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !context.AfterFunc(leaseCtx, f)() {
					panic("stop = false")
				}
			}
		})
	})
}

// ScaleErrLive: sig.Err() on a live lease from every core. The context way:
// ctx.Err().
func BenchmarkScaleErrLive(b *testing.B) {
	run := func(b *testing.B, sig func() *signal.Signal) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			s := sig()
			for pb.Next() {
				if s.Err() != nil {
					panic("lease lost")
				}
			}
		})
	}
	onLeaseAndLimit(b, run)
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if ctx.Err() != nil {
					panic("context done")
				}
			}
		})
	})
}

// ScaleErrLost: sig.Err() on a lost lease from every core, as every
// goroutine of a holder asks at once after the loss. The context way:
// context.Cause, which returns the reason as Err does.
func BenchmarkScaleErrLost(b *testing.B) {
	run := func(b *testing.B, sig func() *signal.Signal) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			s := sig()
			for pb.Next() {
				if s.Err() == nil {
					panic("lease live")
				}
			}
		})
	}
	lostSignal := func() *signal.Signal {
		c := controller.New("bench")
		c.Lose(errCause)
		return c.Signal()
	}
	b.Run("impl=lease", func(b *testing.B) {
		s := lostSignal()
		run(b, func() *signal.Signal { return s })
	})
	b.Run("impl=limit", func(b *testing.B) { run(b, lostSignal) })
	b.Run("impl=context", func(b *testing.B) {
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
}

// loseContexts and loseGoroutines shape ScaleLose: 1,000 contexts, made by
// 16 goroutines at once, half from a request's context and half from
// Background.
const (
	loseContexts   = 1000
	loseGoroutines = 16
)

// ScaleLose: the loss of a lease on which 16 goroutines registered 1,000
// contexts at once, half from a request's context and half from
// Background, and the loss timed from Lose until it returns, with every
// context cancelled. The context way: the cancel of a lease's context from
// which the same contexts were made (context.WithCancel for Background's
// half, WithCancelCause of the request and context.AfterFunc on the lease's
// context for the other), until every context is done. An op is the whole
// round, registrations included; ns/context is the loss alone over 1,000.
func BenchmarkScaleLose(b *testing.B) {
	// register makes the contexts in loseGoroutines goroutines at once.
	register := func(mk func(req context.Context, i int)) {
		var wg, start sync.WaitGroup
		start.Add(1)
		for g := range loseGoroutines {
			wg.Go(func() {
				req, cancelReq := context.WithCancel(context.Background())
				_ = cancelReq // the request outlives the round; collected with it
				start.Wait()
				for i := g; i < loseContexts; i += loseGoroutines {
					mk(req, i)
				}
			})
		}
		start.Done()
		wg.Wait()
	}
	ctxs := make([]context.Context, loseContexts)
	cancels := make([]context.CancelFunc, loseContexts)
	check := func(b *testing.B) {
		for _, ctx := range ctxs {
			if ctx.Err() == nil {
				b.Fatal("a context outlived the loss")
			}
		}
	}
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		var lose time.Duration
		for b.Loop() {
			c := controller.New("bench")
			s := c.Signal()
			register(func(req context.Context, i int) {
				if i%2 == 0 {
					req = context.Background()
				}
				ctxs[i], cancels[i] = s.Context(req)
			})
			t0 := time.Now()
			c.Lose(errCause)
			lose += time.Since(t0)
			check(b)
		}
		b.ReportMetric(float64(lose.Nanoseconds())/float64(b.N)/loseContexts, "ns/context")
	})
	b.Run("impl=context", func(b *testing.B) {
		b.ReportAllocs()
		var lose time.Duration
		for b.Loop() {
			leaseCtx, cancelLease := context.WithCancelCause(context.Background())
			register(func(req context.Context, i int) {
				if i%2 == 0 {
					ctxs[i], cancels[i] = context.WithCancel(leaseCtx)
					return
				}
				ctx, cancel := context.WithCancelCause(req)
				context.AfterFunc(leaseCtx, func() { cancel(context.Cause(leaseCtx)) })
				ctxs[i], cancels[i] = ctx, func() { cancel(context.Canceled) }
			})
			t0 := time.Now()
			cancelLease(errCause)
			// AfterFunc runs its funcs in goroutines of their own: the
			// loss is complete when each of them has cancelled its context.
			for _, ctx := range ctxs {
				<-ctx.Done()
			}
			lose += time.Since(t0)
			check(b)
		}
		b.ReportMetric(float64(lose.Nanoseconds())/float64(b.N)/loseContexts, "ns/context")
	})
}
