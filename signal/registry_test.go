package signal_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

// The registrations a live lease keeps for contexts made from parents other
// than Background stay at most twice the most such contexts live at once,
// whatever holders forget (docs/design.md, Registrations, argues the bound).
// These tests check it on the traffic a server makes: requests in flight
// side by side, ended in any order, cancels called, forgotten, or called in
// any order, beside contexts that live as long as the lease.

// regParent is a parent of contexts: a request's context, or the server's,
// which lives as long as the property.
type regParent struct {
	ctx      context.Context
	cancel   context.CancelFunc
	ended    bool
	children []*regContext
}

// regContext is one context made by Signal.Context, with what the model
// knows of it.
type regContext struct {
	parent *regParent
	ctx    context.Context
	cancel context.CancelFunc // nil where the holder forgot it
	live   bool               // neither its parent has ended nor its cancel was called
}

// regModel is a lease, the parents and contexts made from it, how many of
// them are live and the most that were live at once. Each context is checked
// against the model when it is made and when it stops being live, so that a
// step costs the same however many contexts came before.
type regModel struct {
	c       *controller.Controller
	server  *regParent
	parents []*regParent // every request, ended or not
	ctxs    []*regContext
	live    int
	maxLive int
	made    int // contexts registered: made while their parent was live
	steps   int
	err     error // the first difference from the model
}

func newRegModel() *regModel {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), regKey{}, "server"))
	return &regModel{c: controller.New("orders"), server: &regParent{ctx: ctx, cancel: cancel}}
}

type regKey struct{}

func (m *regModel) request() *regParent {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), regKey{}, "request"))
	p := &regParent{ctx: ctx, cancel: cancel}
	m.parents = append(m.parents, p)
	return p
}

// context makes a context from p; with forget, the holder drops its cancel.
func (m *regModel) context(p *regParent, forget bool) *regContext {
	ctx, cancel := m.c.Signal().Context(p.ctx)
	rc := &regContext{parent: p, ctx: ctx, cancel: cancel, live: !p.ended}
	if forget {
		rc.cancel = nil
	}
	m.ctxs = append(m.ctxs, rc)
	if rc.live {
		m.live++
		m.made++
		p.children = append(p.children, rc)
		if err := ctx.Err(); err != nil {
			m.fail(fmt.Errorf("a context of a live parent: Err() = %v, want nil", err))
		}
	} else if ctx.Err() == nil {
		m.fail(errors.New("a context of an ended parent: Err() = nil, want it done"))
	}
	return rc
}

// end ends p, and with it every context of p that was live.
func (m *regModel) end(p *regParent) {
	if p.ended {
		return
	}
	p.ended = true
	p.cancel()
	for _, rc := range p.children {
		m.dead(rc)
	}
	p.children = nil
}

// callCancel calls rc's cancel, unless the holder forgot it or called it.
func (m *regModel) callCancel(rc *regContext) {
	if rc.cancel != nil {
		rc.cancel()
		rc.cancel = nil
		m.dead(rc)
	}
}

// dead records that rc is no longer live, and checks that it is done.
func (m *regModel) dead(rc *regContext) {
	if !rc.live {
		return
	}
	rc.live = false
	m.live--
	if rc.ctx.Err() == nil {
		m.fail(errors.New("a context whose parent ended or whose cancel was called: Err() = nil, want it done"))
	}
}

func (m *regModel) fail(err error) {
	if m.err == nil {
		m.err = fmt.Errorf("step %d: %w", m.steps, err)
	}
}

// check compares the lease with the model after a step: the registrations
// are at least the live contexts and at most twice the most live at once,
// the slice that holds them has room for at most four times, and
// compactions have looked at most at two entries per context registered.
func (m *regModel) check() error {
	m.steps++
	if m.err != nil {
		return m.err
	}
	m.maxLive = max(m.maxLive, m.live)
	regs := signal.Registrations(m.c.Signal())
	if regs < m.live {
		return fmt.Errorf("step %d: %d registrations with %d contexts live: a live context was dropped", m.steps, regs, m.live)
	}
	if regs > 2*m.maxLive {
		return fmt.Errorf("step %d: %d registrations with %d contexts live, at most %d live at once: want at most %d",
			m.steps, regs, m.live, m.maxLive, 2*m.maxLive)
	}
	capacity, looks := signal.ContextSlots(m.c.Signal())
	if capacity > 4*m.maxLive {
		return fmt.Errorf("step %d: capacity for %d registrations with at most %d contexts live at once: want at most %d",
			m.steps, capacity, m.maxLive, 4*m.maxLive)
	}
	if looks > 2*m.made {
		return fmt.Errorf("step %d: compactions looked at %d entries for %d contexts registered: want at most %d",
			m.steps, looks, m.made, 2*m.made)
	}
	return nil
}

// lose loses the lease and checks that every live context was cancelled with
// the loss and that nothing is kept; then it ends every parent.
func (m *regModel) lose() error {
	defer func() {
		m.end(m.server)
		for _, p := range m.parents {
			m.end(p)
		}
	}()
	m.c.Lose(errRefused)
	for i, rc := range m.ctxs {
		if rc.live && !errors.Is(context.Cause(rc.ctx), errRefused) {
			return fmt.Errorf("context %d live at the loss: Cause() = %v, want the loss", i, context.Cause(rc.ctx))
		}
	}
	if n := signal.Registrations(m.c.Signal()); n != 0 {
		return fmt.Errorf("after the loss the lease keeps %d registrations, want 0", n)
	}
	return nil
}

// TestContextRegistrationsBound runs random schedules: requests opened and
// ended in any order, contexts made from them, from the server's context
// (long-lived) or from Background, cancels called, forgotten, or called in
// any order, and streams of requests with a few in flight. After every step
// the lease keeps every live context and at most twice the most that were
// live at once.
func TestContextRegistrationsBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newRegModel()
		step := func() {
			if err := m.check(); err != nil {
				t.Fatal(err)
			}
		}
		pickParent := func(label string) *regParent {
			if len(m.parents) == 0 || rapid.Bool().Draw(t, label+" from the server") {
				return m.server
			}
			return rapid.SampledFrom(m.parents).Draw(t, label)
		}
		t.Repeat(map[string]func(*rapid.T){
			"request": func(t *rapid.T) {
				m.context(m.request(), rapid.Bool().Draw(t, "forget"))
			},
			"context": func(t *rapid.T) {
				m.context(pickParent("parent"), rapid.Bool().Draw(t, "forget"))
			},
			"background": func(t *rapid.T) {
				// A child of the lease's own context: no registration.
				ctx, cancel := m.c.Signal().Context(context.Background())
				_ = cancel // forgotten
				if ctx.Err() != nil {
					t.Fatalf("Context(Background) on a live lease: Err() = %v", ctx.Err())
				}
			},
			"end request": func(t *rapid.T) {
				if len(m.parents) == 0 {
					t.Skip("no request")
				}
				m.end(rapid.SampledFrom(m.parents).Draw(t, "request"))
			},
			"cancel": func(t *rapid.T) {
				if len(m.ctxs) == 0 {
					t.Skip("no context")
				}
				m.callCancel(rapid.SampledFrom(m.ctxs).Draw(t, "context"))
			},
			"stream": func(t *rapid.T) {
				// n requests, at most w in flight: before each new one
				// beyond w, one in flight ends, the oldest or any; its
				// context's cancel is called before the end, after it, or
				// never.
				n := rapid.IntRange(1, 300).Draw(t, "requests")
				w := rapid.IntRange(1, 8).Draw(t, "in flight")
				inOrder := rapid.Bool().Draw(t, "ended in order")
				how := rapid.IntRange(0, 3).Draw(t, "cancel: 0 forgotten, 1 before the end, 2 after, 3 either")
				var flight []*regContext
				for range n {
					if len(flight) == w {
						i := 0
						if !inOrder {
							i = rapid.IntRange(0, w-1).Draw(t, "ends")
						}
						rc := flight[i]
						flight = append(flight[:i], flight[i+1:]...)
						when := how
						if how == 3 {
							when = rapid.IntRange(0, 2).Draw(t, "cancel")
						}
						if when == 1 {
							m.callCancel(rc)
						}
						m.end(rc.parent)
						if when == 2 {
							m.callCancel(rc)
						}
						step()
					}
					flight = append(flight, m.context(m.request(), how == 0))
					step()
				}
			},
			"": func(t *rapid.T) { step() },
		})
		if err := m.lose(); err != nil {
			t.Fatal(err)
		}
	})
}

// streamed is how many contexts each pattern of TestContextPatternsHeapFlat
// makes: make test runs 100,000 under the race detector, make stress a
// million.
var streamed = flag.Int("streamed", 100_000, "contexts each pattern of TestContextPatternsHeapFlat makes")

// TestContextPatternsHeapFlat streams contexts over requests the way a
// server makes them, each pattern one that kept registrations without limit,
// or at several times the contexts live, before compaction: after every
// context the lease keeps every live one and at most twice the most live at
// once, and over the whole stream the heap stays flat.
func TestContextPatternsHeapFlat(t *testing.T) {
	const bound = 512 << 10 // bytes; one leaked byte per context is 1 MB in make stress
	patterns := []struct {
		name     string
		inFlight int  // requests in flight between one request and the next
		random   bool // which request in flight ends is drawn; else the oldest
		cancel   bool // the holder calls cancel, before the request ends
		long     int  // contexts of the server's context, live throughout, cancel forgotten
	}{
		{name: "two in flight, ended in order", inFlight: 2},
		{name: "1,000 long-lived beside a stream", inFlight: 2, long: 1000},
		{name: "eight in flight, random end order", inFlight: 8, random: true},
		{name: "100 in flight, every cancel called in random order", inFlight: 100, random: true, cancel: true},
	}
	for _, p := range patterns {
		t.Run(p.name, func(t *testing.T) {
			c := controller.New("orders")
			sig := c.Signal()
			server, endServer := context.WithCancel(context.Background())
			defer endServer()
			most, seen, made := 0, 0, 0 // the most contexts live at once, registrations, contexts made
			for range p.long {
				sig.Context(server) // cancel forgotten; live as long as the server
				made++
			}
			rng := rand.New(rand.NewPCG(1, uint64(p.inFlight)))
			type call struct {
				end    context.CancelFunc
				cancel context.CancelFunc
			}
			var flight []call
			check := func() {
				live := p.long + len(flight)
				most = max(most, live)
				regs := signal.Registrations(sig)
				seen = max(seen, regs)
				if regs < live || regs > 2*most {
					t.Fatalf("after %d contexts: %d registrations with %d contexts live, at most %d at once: want %d to %d",
						made, regs, live, most, live, 2*most)
				}
				if capacity, looks := signal.ContextSlots(sig); capacity > 4*most || looks > 2*made {
					t.Fatalf("after %d contexts, at most %d live at once: capacity %d, %d entries looked at: want at most %d and %d",
						made, most, capacity, looks, 4*most, 2*made)
				}
			}
			// Each request starts, then, if more than inFlight are in
			// flight, one of the others ends.
			stream := func(n int) {
				for range n {
					req, end := context.WithCancel(context.Background())
					_, cancel := sig.Context(req)
					made++
					flight = append(flight, call{end, cancel})
					check()
					if len(flight) > p.inFlight {
						i := 0
						if p.random {
							i = rng.IntN(len(flight) - 1)
						}
						if p.cancel {
							flight[i].cancel()
						}
						flight[i].end()
						flight = append(flight[:i], flight[i+1:]...)
						check()
					}
				}
			}
			stream(10_000) // warm up: the limit, pools and size classes
			before := heapAlloc()
			stream(*streamed)
			after := heapAlloc()
			growth := int64(after) - int64(before)
			t.Logf("%d contexts, at most %d live at once: at most %d registrations kept (%.2f×), %d at the end; heap %d -> %d bytes (%+d)",
				*streamed, most, seen, float64(seen)/float64(most), signal.Registrations(sig), before, after, growth)
			if growth > bound {
				t.Errorf("heap grew by %d bytes over %d contexts, want at most %d", growth, *streamed, bound)
			}
			c.Lose(errRefused)
			for _, f := range flight {
				f.end()
			}
		})
	}
}

// A context made from Background is a child of the lease's own context, as
// context.WithCancel makes one: a forgotten cancel keeps it until the lease
// is lost or ended, as a forgotten cancel of context.WithCancel keeps a child
// of a parent that lives on. The test measures what each such context keeps,
// beside context.WithCancel of a live parent, and shows that the loss and the
// end give it all back while the lease itself is still referred to.
func TestContextBackgroundForgottenKeptUntilLossOrEnd(t *testing.T) {
	const n = 20_000
	const least = 64 // bytes per context; a context with its cancel func takes more
	const slack = 64 << 10
	peer := func() float64 {
		parent, cancelParent := context.WithCancel(context.Background())
		defer cancelParent()
		before := heapAlloc()
		for range n {
			_, cancel := context.WithCancel(parent)
			forget(cancel)
		}
		return float64(int64(heapAlloc())-int64(before)) / n
	}()
	for _, how := range []string{"lost", "ended"} {
		t.Run(how, func(t *testing.T) {
			c := controller.New("orders")
			sig := c.Signal()
			_, cancel := sig.Context(context.Background()) // the lease's own context is made
			cancel()
			before := heapAlloc()
			for range n {
				sig.Context(context.Background()) // cancel forgotten
			}
			kept := heapAlloc()
			per := float64(int64(kept)-int64(before)) / n
			if how == "lost" {
				c.Lose(errRefused)
			} else {
				c.End()
			}
			after := heapAlloc()
			t.Logf("%d contexts from Background, cancel forgotten: %.1f bytes each kept until %s (context.WithCancel of a live parent: %.1f); heap after: %+d bytes",
				n, per, how, peer, int64(after)-int64(before))
			if per < least {
				t.Errorf("each context keeps %.1f bytes, want at least %d: the measure does not see them", per, least)
			}
			if int64(after)-int64(before) > slack {
				t.Errorf("once the lease is %s the heap is %+d bytes from before the contexts, want at most %d", how, int64(after)-int64(before), slack)
			}
			runtime.KeepAlive(c)
		})
	}
}

// forget drops a cancel func, as a holder that forgets it does, in a way go
// vet's lostcancel accepts.
func forget(context.CancelFunc) {}

// TestContextRegistrationsBoundConcurrent makes and cancels contexts from
// many goroutines at once, on a lease whose registry has its set of shards
// (given by Spread, or by the contention itself), as a server's handlers do:
// each goroutine streams requests with a few in flight, ends them in any
// order, and calls, forgets or calls late the cancels, beside contexts of
// the server's context that live throughout and contexts made from
// Background. A checker goroutine meanwhile reads the registrations. Each
// shard keeps at most twice the most of its contexts live at once, plus
// one, and each shard's live contexts are at most all of them, so the lease
// keeps at most shards × (2 × most live at once + 1) registrations, with at
// least every context still live; compactions look at most at two entries
// per context registered (docs/design.md, Registrations). After the loss,
// every context still live was cancelled with it and nothing is kept.
func TestContextRegistrationsBoundConcurrent(t *testing.T) {
	const goroutines = 16
	for _, spread := range []bool{true, false} {
		t.Run(fmt.Sprintf("spread=%v", spread), func(t *testing.T) {
			c := controller.New("orders")
			s := c.Signal()
			if spread {
				signal.Spread(s)
			}
			var live, maxLive, made atomic.Int64
			enter := func() {
				n := live.Add(1)
				for m := maxLive.Load(); n > m && !maxLive.CompareAndSwap(m, n); m = maxLive.Load() {
				}
			}
			// check reads the lease against the counts. Shards are read
			// one after another while registrations go on, so the bound
			// uses the most live at once so far, read after.
			check := func() error {
				regs := signal.Registrations(s)
				capacity, looks := signal.ContextSlots(s)
				shards := int64(signal.Shards(s))
				most := maxLive.Load()
				if bound := shards * (2*most + 1); int64(regs) > bound {
					return fmt.Errorf("%d registrations in %d shards with at most %d contexts live at once: want at most %d", regs, shards, most, bound)
				}
				if bound := shards * (4*most + 2); int64(capacity) > bound {
					return fmt.Errorf("capacity for %d registrations in %d shards with at most %d contexts live at once: want at most %d", capacity, shards, most, bound)
				}
				if m := made.Load(); int64(looks) > 2*m {
					return fmt.Errorf("compactions looked at %d entries for %d contexts registered: want at most %d", looks, m, 2*m)
				}
				return nil
			}
			server, stopServer := context.WithCancel(context.Background())
			defer stopServer()
			var wg sync.WaitGroup
			var errs sync.Map
			var long sync.Mutex
			var longCtxs []context.Context
			for g := range goroutines {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 1))
					type inFlight struct {
						ctx          context.Context
						cancel       context.CancelFunc
						end          context.CancelFunc
						cancelFirst  bool
						forgetCancel bool
					}
					var flight []inFlight
					finish := func(f inFlight) {
						if f.cancelFirst && !f.forgetCancel {
							f.cancel()
						}
						f.end()
						live.Add(-1)
						if f.ctx.Err() == nil {
							errs.Store("a context whose parent ended is not done", true)
						}
						if !f.cancelFirst && !f.forgetCancel {
							f.cancel()
						}
					}
					for i := range 2000 {
						switch r.IntN(20) {
						case 0:
							// A context of the server's context, kept to the loss.
							enter()
							made.Add(1)
							ctx, _ := s.Context(server) // kept until the loss, which cancels it
							long.Lock()
							longCtxs = append(longCtxs, ctx)
							long.Unlock()
							continue
						case 1:
							ctx, cancel := s.Context(context.Background())
							if ctx.Err() != nil {
								errs.Store("Context(Background) on a live lease is done", true)
							}
							cancel()
							continue
						}
						if len(flight) == 1+g%8 {
							j := r.IntN(len(flight))
							if g%2 == 0 {
								j = 0 // ended in order
							}
							finish(flight[j])
							flight = append(flight[:j], flight[j+1:]...)
						}
						req, end := context.WithCancel(context.Background())
						enter()
						made.Add(1)
						ctx, cancel := s.Context(req)
						flight = append(flight, inFlight{ctx, cancel, end, r.IntN(2) == 0, r.IntN(3) == 0})
						if i%100 == 0 {
							runtime.Gosched()
						}
					}
					for _, f := range flight {
						finish(f)
					}
				})
			}
			checking := make(chan struct{})
			checked := make(chan error, 1)
			go func() {
				for {
					if err := check(); err != nil {
						checked <- err
						return
					}
					select {
					case <-checking:
						checked <- nil
						return
					default:
						runtime.Gosched()
					}
				}
			}()
			wg.Wait()
			close(checking)
			if err := <-checked; err != nil {
				t.Fatal(err)
			}
			if err := check(); err != nil {
				t.Fatal(err)
			}
			errs.Range(func(k, _ any) bool { t.Error(k); return true })
			if n := int64(signal.Registrations(s)); n < live.Load() {
				t.Errorf("%d registrations with %d contexts live: a live context was dropped", n, live.Load())
			}
			t.Logf("%d shards, at most %d contexts live at once, %d registered, %d kept at the end",
				signal.Shards(s), maxLive.Load(), made.Load(), signal.Registrations(s))
			c.Lose(errRefused)
			for i, ctx := range longCtxs {
				if !errors.Is(context.Cause(ctx), errRefused) {
					t.Fatalf("context %d of the server's context at the loss: Cause() = %v, want the loss", i, context.Cause(ctx))
				}
			}
			if n := signal.Registrations(s); n != 0 {
				t.Errorf("after the loss the lease keeps %d registrations, want 0", n)
			}
		})
	}
}
