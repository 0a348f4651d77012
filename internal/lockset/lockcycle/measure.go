package lockcycle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/zukhruf/lease"
)

// Config is what Measure does; a zero field takes its default.
type Config struct {
	// Cycles is the most Lock→Unlock cycles of the one-goroutine phase,
	// each on a subject of its own (3000). The phase stops early once
	// Budget has passed and MinCycles are done, so that a slow locker
	// yields fewer samples, not a longer run.
	Cycles int
	// MinCycles is the fewest cycles of the one-goroutine phase (200).
	MinCycles int
	// Budget bounds the one-goroutine phase (8 s).
	Budget time.Duration
	// Goroutines is how many goroutines the throughput phase runs (32),
	// each on subjects of its own, PerGoroutine cycles each (20).
	Goroutines, PerGoroutine int
	// HandOvers is how many hand-overs the contended phase makes (30).
	HandOvers int
	// Settle is how long the waiter is left in its Lock before the holder
	// unlocks (100 ms), plus a time up to Spread at random (Settle/2), so
	// that a waiter that polls is caught at every phase of its period: a
	// Spread of the waiter's longest period.
	Settle, Spread time.Duration
	// Timeout bounds each Lock and Unlock (30 s).
	Timeout time.Duration
	// Warmup is how many cycles each locker makes before the figures,
	// which dial its connections (10).
	Warmup int
	// Prefix begins every subject (cycle); the subjects of one Measure
	// are Prefix-u-N, Prefix-tG-N, Prefix-w-N and Prefix-h, which every
	// coordinator of this repository takes as a name.
	Prefix string
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Cycles, 3000)
	def(&c.MinCycles, 200)
	def(&c.Goroutines, 32)
	def(&c.PerGoroutine, 20)
	def(&c.HandOvers, 30)
	def(&c.Warmup, 10)
	c.MinCycles = min(c.MinCycles, c.Cycles)
	if c.Budget <= 0 {
		c.Budget = 8 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 100 * time.Millisecond
	}
	if c.Spread <= 0 {
		c.Spread = c.Settle / 2
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "cycle"
	}
	return c
}

// Result is what Measure found.
type Result struct {
	// Cycles one goroutine made, and the p50 and p99 of their times,
	// from Lock's call to Unlock's return.
	Cycles             int
	CycleP50, CycleP99 time.Duration
	// Goroutines made Parallel cycles in all, PerSecond a second.
	Goroutines, Parallel int
	PerSecond            float64
	// HandOvers made, and the p50 and the most of their times, from the
	// holder's call of Unlock to the return of the waiter's Lock.
	HandOvers                int
	HandOverP50, HandOverMax time.Duration

	// The samples, which Add merges.
	cycles, handOvers []time.Duration
	elapsed           time.Duration // of the Parallel cycles
}

// Add returns the result of r's samples and o's together, as if one
// Measure had made them all: so that a run measures its clients in rounds,
// each client a part of the time in each, and a change in the machine's
// load over the run falls on every client alike.
func (r Result) Add(o Result) Result {
	var s Result
	s.cycles = append(slices.Clone(r.cycles), o.cycles...)
	s.handOvers = append(slices.Clone(r.handOvers), o.handOvers...)
	s.Goroutines = max(r.Goroutines, o.Goroutines)
	s.Parallel, s.elapsed = r.Parallel+o.Parallel, r.elapsed+o.elapsed
	s.summarize()
	return s
}

// summarize sets r's figures from its samples.
func (r *Result) summarize() {
	r.Cycles = len(r.cycles)
	r.CycleP50, r.CycleP99 = percentile(r.cycles, 0.50), percentile(r.cycles, 0.99)
	r.HandOvers = len(r.handOvers)
	r.HandOverP50, r.HandOverMax = percentile(r.handOvers, 0.50), percentile(r.handOvers, 1)
	r.PerSecond = 0
	if r.elapsed > 0 {
		r.PerSecond = float64(r.Parallel) / r.elapsed.Seconds()
	}
}

// Measure measures the lock cycle of a, with b, another client of the same
// coordinator, as the waiter of the hand-overs. It leaves nothing held,
// and returns the first error of a call, naming the phase.
func Measure(ctx context.Context, a, b lease.Locker, c Config) (Result, error) {
	c = c.withDefaults()
	var r Result
	for i := range c.Warmup {
		for _, l := range []lease.Locker{a, b} {
			if _, err := cycle(ctx, l, fmt.Sprintf("%s-w-%d", c.Prefix, i), c.Timeout); err != nil {
				return r, fmt.Errorf("lockcycle: warm-up: %w", err)
			}
		}
	}

	times := make([]time.Duration, 0, c.Cycles)
	start := time.Now()
	for i := 0; i < c.Cycles && (i < c.MinCycles || time.Since(start) < c.Budget); i++ {
		d, err := cycle(ctx, a, fmt.Sprintf("%s-u-%d", c.Prefix, i), c.Timeout)
		if err != nil {
			return r, fmt.Errorf("lockcycle: one goroutine, cycle %d: %w", i, err)
		}
		times = append(times, d)
	}
	r.cycles = times

	var err error
	if r.elapsed, err = throughput(ctx, a, c); err != nil {
		return r, err
	}
	r.Goroutines, r.Parallel = c.Goroutines, c.Goroutines*c.PerGoroutine

	subject := c.Prefix + "-h"
	for i := range c.HandOvers {
		d, err := handOver(ctx, a, b, subject, c)
		if err != nil {
			return r, fmt.Errorf("lockcycle: hand-over %d: %w", i, err)
		}
		r.handOvers = append(r.handOvers, d)
	}
	r.summarize()
	return r, nil
}

// cycle locks subject with l and unlocks it, and returns the time from
// Lock's call to Unlock's return.
func cycle(ctx context.Context, l lease.Locker, subject string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	le, err := l.Lock(ctx, subject)
	if err != nil {
		return 0, fmt.Errorf("the Lock of %q: %w", subject, err)
	}
	if err := le.Unlock(ctx); err != nil {
		return 0, fmt.Errorf("the Unlock of %q: %w", subject, err)
	}
	return time.Since(start), nil
}

// throughput runs c.Goroutines goroutines of c.PerGoroutine cycles each,
// on subjects of their own, and returns how long they took.
func throughput(ctx context.Context, l lease.Locker, c Config) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg, warm sync.WaitGroup
	errs := make([]error, c.Goroutines)
	ready := make(chan struct{})
	warm.Add(c.Goroutines)
	for g := range c.Goroutines {
		wg.Go(func() {
			// One cycle each before the clock starts, so that a pool
			// has dialed the connections that the goroutines use at
			// once.
			_, err := cycle(ctx, l, fmt.Sprintf("%s-t%d-w", c.Prefix, g), c.Timeout)
			warm.Done()
			if err != nil {
				errs[g] = fmt.Errorf("lockcycle: %d goroutines, goroutine %d, warm-up: %w", c.Goroutines, g, err)
				cancel()
				return
			}
			<-ready
			for i := range c.PerGoroutine {
				if _, err := cycle(ctx, l, fmt.Sprintf("%s-t%d-%d", c.Prefix, g, i), c.Timeout); err != nil {
					errs[g] = fmt.Errorf("lockcycle: %d goroutines, goroutine %d, cycle %d: %w", c.Goroutines, g, i, err)
					cancel()
					return
				}
			}
		})
	}
	warm.Wait()
	start := time.Now()
	close(ready)
	wg.Wait()
	elapsed := time.Since(start)
	// The first error is the cause; the others may be the cancel's.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return 0, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return elapsed, nil
}

// granted is the waiter's Lock's outcome, and when it returned.
type granted struct {
	le  lease.Lease
	err error
	at  time.Time
}

// handOver has a take subject, b wait for it in Lock, then a unlock it,
// and returns the time from a's call of Unlock to the return of b's Lock.
func handOver(ctx context.Context, a, b lease.Locker, subject string, c Config) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	held, err := a.Lock(ctx, subject)
	if err != nil {
		return 0, fmt.Errorf("the holder's Lock: %w", err)
	}
	got := make(chan granted, 1)
	go func() {
		le, err := b.Lock(ctx, subject)
		got <- granted{le, err, time.Now()}
	}()
	// The waiter must not be left in its Lock: on the way out, its lease
	// is released or its Lock cut.
	waiter := func() (granted, error) {
		g := <-got
		if g.err != nil {
			return g, fmt.Errorf("the waiter's Lock: %w", g.err)
		}
		return g, nil
	}
	settle := c.Settle + rand.N(c.Spread+1)
	select {
	case g := <-got:
		held.Unlock(ctx)
		if g.err == nil {
			g.le.Unlock(ctx)
			return 0, errors.New("the waiter was granted the subject while the holder held it")
		}
		return 0, fmt.Errorf("the waiter's Lock: %w", g.err)
	case <-time.After(settle):
	}
	start := time.Now()
	if err := held.Unlock(ctx); err != nil {
		cancel()
		if g, werr := waiter(); werr == nil {
			g.le.Unlock(context.Background())
		}
		return 0, fmt.Errorf("the holder's Unlock: %w", err)
	}
	g, err := waiter()
	if err != nil {
		return 0, err
	}
	d := g.at.Sub(start)
	if err := g.le.Unlock(ctx); err != nil {
		return 0, fmt.Errorf("the waiter's Unlock: %w", err)
	}
	return d, nil
}

// percentile returns the nearest-rank p-quantile of ds (p in (0, 1]),
// or 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	i := int(math.Ceil(float64(len(ds))*p)) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
