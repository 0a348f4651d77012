package controller_test

import (
	"errors"
	"flag"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/controller"
)

var soakFull = flag.Bool("soak", false, "run TestSoak at full size: 100,000 leases, 10,000 waiters on Done, 10,000 AfterLoss callbacks")

type soakSize struct {
	leases, waiters, callbacks, issuers int
}

var (
	soakSmall = soakSize{leases: 2_000, waiters: 200, callbacks: 200, issuers: 8}
	soakLarge = soakSize{leases: 100_000, waiters: 10_000, callbacks: 10_000, issuers: 32}
)

var errSoak = errors.New("the coordinator refused the claim")

// TestSoak loses and ends many leases at random from many goroutines while
// goroutines wait on their Done channels and callbacks wait for their loss.
// At the end every waiter woke exactly when its lease was lost, every
// callback of a lost lease ran once and no other ran, no goroutine is left
// and the heap is back near where it started. make test runs it small;
// -soak (make stress) runs it at full size.
func TestSoak(t *testing.T) {
	size := soakSmall
	if *soakFull {
		size = soakLarge
	}
	began := time.Now()
	before := goleak.IgnoreCurrent()
	goroutines0 := runtime.NumGoroutine()
	// The runtime keeps the descriptors of exited goroutines for reuse, on
	// its heap. Start and end as many goroutines as the run will have at
	// once, so that the heap at start already holds them.
	warmGoroutines(size.waiters + size.callbacks + size.issuers)
	heap0 := heapInUse()

	leases := make([]*controller.Controller, size.leases)
	for i := range leases {
		leases[i] = controller.New("soak")
	}

	// Waiters: each blocks on the Done of one lease until it is lost, or
	// until release once every loss has been counted.
	var (
		waiting   sync.WaitGroup
		waiters   sync.WaitGroup
		woken     = make(chan int, size.waiters)
		release   = make(chan struct{})
		wokeLease = make([]int, size.waiters) // which lease waiter i waits on
		woke      = make([]bool, size.waiters)
		errAtWake = make([]error, size.waiters)
	)
	for i := range size.waiters {
		wokeLease[i] = i * size.leases / size.waiters
		sig := leases[wokeLease[i]].Signal()
		waiting.Add(1)
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			done := sig.Done()
			waiting.Done()
			select {
			case <-done:
				// The loss synchronizes before this receive: Err must see it.
				woke[i], errAtWake[i] = true, sig.Err()
				woken <- i
			case <-release:
			}
		}()
	}
	waiting.Wait()

	// Callbacks, on other leases than the waiters' where the sizes allow.
	var (
		ran      = make(chan int, size.callbacks)
		runs     = make([]atomic.Int32, size.callbacks)
		cbLease  = make([]int, size.callbacks)
		stopping = make([]func() bool, size.callbacks)
	)
	for i := range size.callbacks {
		cbLease[i] = (i*size.leases/size.callbacks + size.leases/(2*size.callbacks)) % size.leases
		stopping[i] = leases[cbLease[i]].Signal().AfterLoss(func() {
			runs[i].Add(1)
			ran <- i
		})
	}
	goroutinesPeak := runtime.NumGoroutine()
	heapPeak := heapInUse()

	// Issuers: each goes through the leases in its own order and loses or
	// ends about three in every issuers of them, so most leases see two to
	// four racing calls and some see none.
	wins := make([]atomic.Int32, size.leases)
	lostBy := make([]atomic.Bool, size.leases)
	var issuers sync.WaitGroup
	for g := range size.issuers {
		issuers.Add(1)
		go func() {
			defer issuers.Done()
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for _, i := range r.Perm(size.leases) {
				if r.IntN(size.issuers) >= 3 {
					continue
				}
				if r.IntN(2) == 0 {
					if leases[i].Lose(errSoak) {
						wins[i].Add(1)
						lostBy[i].Store(true)
					}
				} else if leases[i].End() {
					wins[i].Add(1)
				}
			}
		}()
	}
	issuers.Wait()

	var nLost, nEnded, nLive int
	for i, c := range leases {
		lost := c.Signal().Err() != nil
		switch w := wins[i].Load(); {
		case w > 1:
			t.Fatalf("lease %d: %d calls won, want at most 1", i, w)
		case lost != lostBy[i].Load():
			t.Fatalf("lease %d: Err() = %v, but a winning Lose = %v", i, c.Signal().Err(), lostBy[i].Load())
		case lost:
			nLost++
		case w == 1:
			nEnded++
		default:
			nLive++
		}
	}

	// Every waiter on a lost lease must wake; wait for that many, bounded
	// only against a hang, then let the others go.
	wantWakes := 0
	for i := range size.waiters {
		if leases[wokeLease[i]].Signal().Err() != nil {
			wantWakes++
		}
	}
	guard := time.After(hangGuard)
	for range wantWakes {
		select {
		case <-woken:
		case <-guard:
			t.Fatalf("fewer than %d waiters on lost leases woke", wantWakes)
		}
	}
	close(release)
	waiters.Wait()
	for i := range size.waiters {
		err := leases[wokeLease[i]].Signal().Err()
		switch {
		case woke[i] && err == nil:
			t.Fatalf("waiter %d woke but its lease is not lost", i)
		case woke[i] && errAtWake[i] != err:
			t.Fatalf("waiter %d woke and saw Err() = %v, want %v", i, errAtWake[i], err)
		case !woke[i] && err != nil:
			t.Fatalf("waiter %d did not wake but its lease is lost", i)
		}
	}

	wantRuns := 0
	for i := range size.callbacks {
		if leases[cbLease[i]].Signal().Err() != nil {
			wantRuns++
		}
	}
	for range wantRuns {
		select {
		case <-ran:
		case <-guard:
			t.Fatalf("fewer than %d callbacks of lost leases ran", wantRuns)
		}
	}
	for i := range size.callbacks {
		want := int32(0)
		if leases[cbLease[i]].Signal().Err() != nil {
			want = 1
		}
		if got := runs[i].Load(); got != want {
			t.Fatalf("callback %d ran %d times, want %d", i, got, want)
		}
		if stopping[i]() {
			// Only a live lease keeps a callback that stop can still keep
			// from running.
			if leases[cbLease[i]].Signal().Err() != nil || wins[cbLease[i]].Load() != 0 {
				t.Fatalf("stop of callback %d returned true on a lease that is no longer live", i)
			}
		}
	}

	// The leases, the callbacks and the stop funcs are dead from here on:
	// nothing the test still uses refers to them.
	goleak.VerifyNone(t, before)
	heapEnd := heapInUse()
	goroutinesEnd := runtime.NumGoroutine()
	t.Logf("%d leases: %d lost, %d ended, %d never touched; %d issuers", size.leases, nLost, nEnded, nLive, size.issuers)
	t.Logf("%d waiters on Done: %d woke, all on lost leases; %d callbacks: %d ran once, the rest never", size.waiters, wantWakes, size.callbacks, wantRuns)
	t.Logf("goroutines: %d at start, %d at peak, %d at end", goroutines0, goroutinesPeak, goroutinesEnd)
	t.Logf("heap in use: %.1f MiB at start, %.1f MiB at peak, %.1f MiB at end", mib(heap0), mib(heapPeak), mib(heapEnd))
	t.Logf("took %v", time.Since(began).Round(time.Millisecond))

	// Near where it started: within a tenth of what the run added, plus one
	// MiB for the runtime's own bookkeeping.
	if limit := heap0 + (heapPeak-heap0)/10 + 1<<20; heapEnd > limit {
		t.Errorf("heap in use at end %.1f MiB, want at most %.1f MiB", mib(heapEnd), mib(limit))
	}
}

func warmGoroutines(n int) {
	var started, exited sync.WaitGroup
	stop := make(chan struct{})
	for range n {
		started.Add(1)
		exited.Add(1)
		go func() {
			defer exited.Done()
			started.Done()
			<-stop
		}()
	}
	started.Wait()
	close(stop)
	exited.Wait()
}

// heapInUse returns the bytes of live heap objects after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
