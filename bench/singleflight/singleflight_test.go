package singleflight_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	xsync "golang.org/x/sync/singleflight"

	"github.com/zukhruf/lease/issuers/singleflight"
	"github.com/zukhruf/lease/signal"
)

// group is what the benchmarks ask of either implementation: Do of a flight
// whose fn calls work, and DoChan.
type group interface {
	do(key string, work func() int) (int, bool)
	doChan(key string, work func() int) <-chan int
}

// leaseGroup is the lease's Group; fn checks sig.Err before it returns, as a
// flight does before its write, and does not make its context.
type leaseGroup struct{ g singleflight.Group[int] }

func (l *leaseGroup) do(key string, work func() int) (int, bool) {
	v, _, shared := l.g.Do(context.Background(), key, func(_ context.Context, sig *signal.Signal) (int, error) {
		v := work()
		return v, sig.Err()
	})
	return v, shared
}

func (l *leaseGroup) doChan(key string, work func() int) <-chan int {
	ch := make(chan int, 1)
	r := l.g.DoChan(context.Background(), key, func(_ context.Context, sig *signal.Signal) (int, error) {
		v := work()
		return v, sig.Err()
	})
	go func() { ch <- (<-r).Val }()
	return ch
}

// xsyncGroup is x/sync's Group, whose fn returns any.
type xsyncGroup struct{ g xsync.Group }

func (x *xsyncGroup) do(key string, work func() int) (int, bool) {
	v, _, shared := x.g.Do(key, func() (any, error) { return work(), nil })
	return v.(int), shared
}

func (x *xsyncGroup) doChan(key string, work func() int) <-chan int {
	ch := make(chan int, 1)
	r := x.g.DoChan(key, func() (any, error) { return work(), nil })
	go func() { ch <- (<-r).Val.(int) }()
	return ch
}

var impls = []struct {
	name string
	new  func() group
}{
	{"lease", func() group { return new(leaseGroup) }},
	{"xsync", func() group { return new(xsyncGroup) }},
}

var sink atomic.Int64

func one() int { return 1 }

// Do: one caller, one flight per op: what a flight costs, lease and all.
func BenchmarkDo(b *testing.B) {
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			g := impl.new()
			for b.Loop() {
				v, _ := g.do("key", one)
				sink.Add(int64(v))
			}
		})
	}
}

// DoParallel: every core calls Do on one of 4 keys at once, and fn does a
// little work, so that callers come while a flight runs and join it.
func BenchmarkDoParallel(b *testing.B) {
	keys := []string{"a", "b", "c", "d"}
	work := func() int {
		s := 0
		for i := range 200 {
			s += i
		}
		return s
	}
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			g := impl.new()
			var next atomic.Uint32
			b.RunParallel(func(pb *testing.PB) {
				key := keys[next.Add(1)%uint32(len(keys))]
				var shared int64
				for pb.Next() {
					_, s := g.do(key, work)
					if s {
						shared++
					}
				}
				sink.Add(shared)
			})
		})
	}
}

// DoContext: one caller, one flight per op, whose fn waits on its context
// as a call made with it does; the first caller's context is Background or
// a live request's. x/sync's fn gets no context: its peer makes its own with
// context.WithCancel of the caller's, as a user switching would.
func BenchmarkDoContext(b *testing.B) {
	live, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, parent := range []struct {
		name string
		ctx  context.Context
	}{{"Background", context.Background()}, {"live", live}} {
		b.Run("caller="+parent.name, func(b *testing.B) {
			b.Run("impl=lease", func(b *testing.B) {
				b.ReportAllocs()
				var g singleflight.Group[int]
				fn := func(ctx context.Context, sig *signal.Signal) (int, error) { return waitDone(ctx), sig.Err() }
				for b.Loop() {
					v, _, _ := g.Do(parent.ctx, "key", fn)
					sink.Add(int64(v))
				}
			})
			b.Run("impl=xsync", func(b *testing.B) {
				b.ReportAllocs()
				var g xsync.Group
				for b.Loop() {
					v, _, _ := g.Do("key", func() (any, error) {
						ctx, cancel := context.WithCancel(parent.ctx)
						defer cancel()
						return waitDone(ctx), nil
					})
					sink.Add(int64(v.(int)))
				}
			})
		})
	}
}

// waitDone stands for a call made with ctx: it looks at Done.
func waitDone(ctx context.Context) int {
	select {
	case <-ctx.Done():
		return 0
	default:
		return 1
	}
}

// forgetContexts is the size of the context tree of the flight that
// ForgetStall forgets.
const forgetContexts = 100_000

// ForgetStall: a flight whose fn made 100,000 contexts from its lease (the
// lease's: half from Background, half from fn's context) or from its own
// context (x/sync's, where fn makes its own with context.WithCancel) is
// forgotten, and another goroutine calls Do on another key as soon as the
// forgotten flight shows its loss (for x/sync, as soon as Forget is
// called). An op is the whole round, the contexts included; ns/Do is the
// time that Do took: what a Forget holds up other keys for.
func BenchmarkForgetStall(b *testing.B) {
	b.Run("impl=lease", func(b *testing.B) {
		b.ReportAllocs()
		var g singleflight.Group[int]
		other := func(context.Context, *signal.Signal) (int, error) { return 1, nil }
		var waited time.Duration
		for b.Loop() {
			ready, finish := make(chan *signal.Signal), make(chan struct{})
			done := g.DoChan(context.Background(), "key", func(ctx context.Context, sig *signal.Signal) (int, error) {
				for i := range forgetContexts {
					parent := ctx
					if i%2 == 0 {
						parent = context.Background()
					}
					sig.Context(parent) // cancelled by the loss
				}
				ready <- sig
				<-finish
				return 1, nil
			})
			sig := <-ready
			forgotten := make(chan struct{})
			go func() { g.Forget("key"); close(forgotten) }()
			<-sig.Done()
			t0 := time.Now()
			g.Do(context.Background(), "other", other)
			waited += time.Since(t0)
			<-forgotten
			close(finish)
			<-done
		}
		b.ReportMetric(float64(waited.Nanoseconds())/float64(b.N), "ns/Do")
	})
	b.Run("impl=xsync", func(b *testing.B) {
		b.ReportAllocs()
		var g xsync.Group
		other := func() (any, error) { return 1, nil }
		var waited time.Duration
		for b.Loop() {
			ready, finish := make(chan struct{}), make(chan struct{})
			done := g.DoChan("key", func() (any, error) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cancels := make([]context.CancelFunc, forgetContexts)
				for i := range cancels {
					_, cancels[i] = context.WithCancel(ctx)
				}
				close(ready)
				<-finish
				return 1, nil
			})
			<-ready
			forgotten := make(chan struct{})
			go func() { g.Forget("key"); close(forgotten) }()
			t0 := time.Now()
			g.Do("other", other)
			waited += time.Since(t0)
			<-forgotten
			close(finish)
			<-done
		}
		b.ReportMetric(float64(waited.Nanoseconds())/float64(b.N), "ns/Do")
	})
}

func TestGroupsAgree(t *testing.T) {
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			g := impl.new()
			if v, shared := g.do("key", one); v != 1 || shared {
				t.Errorf("do = %d, %v, want 1, false", v, shared)
			}
			if v := <-g.doChan("key", one); v != 1 {
				t.Errorf("doChan = %d, want 1", v)
			}
		})
	}
}

// TestAllocsBesideXSync: a flight of the lease's Group allocates no more
// than one of x/sync's, and a caller that joins it (by DoChan, whose
// joins need no goroutine to count) no more than one that joins x/sync's.
func TestAllocsBesideXSync(t *testing.T) {
	ctx := context.Background()
	var lg singleflight.Group[int]
	var xg xsync.Group
	leaseFn := func(_ context.Context, sig *signal.Signal) (int, error) { return 1, sig.Err() }
	xsyncFn := func() (any, error) { return 1, nil }
	lg.Do(ctx, "key", leaseFn) // make each Group's map
	xg.Do("key", xsyncFn)

	lease := testing.AllocsPerRun(1000, func() { lg.Do(ctx, "key", leaseFn) })
	x := testing.AllocsPerRun(1000, func() { xg.Do("key", xsyncFn) })
	t.Logf("Do of a flight: lease %v allocations, x/sync %v", lease, x)
	if lease > x {
		t.Errorf("Do of a flight: lease %v allocations, x/sync %v: want no more", lease, x)
	}

	release := make(chan struct{})
	leaseBlock := func(context.Context, *signal.Signal) (int, error) { <-release; return 1, nil }
	xsyncBlock := func() (any, error) { <-release; return 1, nil }
	var flight float64
	for _, waiters := range []int{0, 1, 8, 64} {
		lc := make([]<-chan singleflight.Result[int], 0, waiters+1)
		xc := make([]<-chan xsync.Result, 0, waiters+1)
		lease := testing.AllocsPerRun(100, func() {
			for range waiters + 1 {
				lc = append(lc, lg.DoChan(ctx, "key", leaseBlock))
			}
			release <- struct{}{}
			for _, ch := range lc {
				<-ch
			}
			lc = lc[:0]
		})
		x := testing.AllocsPerRun(100, func() {
			for range waiters + 1 {
				xc = append(xc, xg.DoChan("key", xsyncBlock))
			}
			release <- struct{}{}
			for _, ch := range xc {
				<-ch
			}
			xc = xc[:0]
		})
		t.Logf("DoChan, a flight and %d callers joined: lease %v allocations, x/sync %v", waiters, lease, x)
		if waiters == 0 {
			flight = lease - x
			if flight > 0 {
				t.Errorf("DoChan of a flight: lease %v allocations, x/sync %v: want no more", lease, x)
			}
		} else if lease-x != flight {
			t.Errorf("DoChan, a flight and %d callers joined: lease %v allocations, x/sync %v: %v more than x/sync, against %v for a flight alone",
				waiters, lease, x, lease-x, flight)
		}
	}
}

func Example() {
	var g singleflight.Group[string]
	v, err, shared := g.Do(context.Background(), "key", func(ctx context.Context, sig *signal.Signal) (string, error) {
		return "bar", sig.Err()
	})
	fmt.Println(v, err, shared)
	// Output: bar <nil> false
}
