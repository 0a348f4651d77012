package singleflight_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/zukhruf/lease/issuers/singleflight"
	"github.com/zukhruf/lease/signal"
)

// A cache filled through a Group, and a writer that changes the row and
// forgets the flight that was reading the old one. The old flight checks
// sig.Err() before it writes, and so does not put the stale row over the
// newer flight's.
func Example_cacheFill() {
	var (
		g     singleflight.Group[string]
		mu    sync.Mutex // guards cache and row
		cache = map[string]string{}
		row   = "v1"
	)
	// fill reads the row, then writes it to the cache unless the flight
	// was forgotten meanwhile. The check and the write are made under the
	// mutex the writer holds while it forgets, so no Forget falls between.
	fill := func(read func() string) func(context.Context, *signal.Signal) (string, error) {
		return func(ctx context.Context, sig *signal.Signal) (string, error) {
			v := read()
			mu.Lock()
			defer mu.Unlock()
			if err := sig.Err(); err != nil {
				return v, err // forgotten: a newer flight fills the cache
			}
			cache["user:1"] = v
			return v, nil
		}
	}
	readRow := func() string {
		mu.Lock()
		defer mu.Unlock()
		return row
	}

	// A first fill reads v1 and stalls before its write.
	read, stall := make(chan struct{}), make(chan struct{})
	first := g.DoChan(context.Background(), "user:1", fill(func() string {
		v := readRow()
		close(read)
		<-stall
		return v
	}))
	<-read

	// A writer changes the row and forgets the flight, as it drops the
	// cache entry.
	mu.Lock()
	row = "v2"
	delete(cache, "user:1")
	g.Forget("user:1")
	mu.Unlock()

	// The next caller starts a new flight, which fills the cache with v2.
	v, err, _ := g.Do(context.Background(), "user:1", fill(readRow))
	fmt.Println("second flight:", v, err)

	// The first flight goes on, finds its lease lost, and does not write.
	close(stall)
	r := <-first
	fmt.Println("first flight:", r.Val, errors.Is(r.Err, singleflight.ErrForgotten))
	fmt.Println("cache:", cache["user:1"])
	// Output:
	// second flight: v2 <nil>
	// first flight: v1 true
	// cache: v2
}

// The example of x/sync's Group, with the lease's fn.
func ExampleGroup() {
	var g singleflight.Group[string]

	block := make(chan struct{})
	res1c := g.DoChan(context.Background(), "key", func(context.Context, *signal.Signal) (string, error) {
		<-block
		return "func 1", nil
	})
	res2c := g.DoChan(context.Background(), "key", func(context.Context, *signal.Signal) (string, error) {
		<-block
		return "func 2", nil
	})
	close(block)

	res1 := <-res1c
	res2 := <-res2c

	// Results are shared by functions executed with duplicate keys.
	fmt.Println("Shared:", res2.Shared)
	// Only the first function is executed: it is registered and started with "key",
	// and doesn't complete before the second function is registered with a duplicate key.
	fmt.Println("Equal results:", res1.Val == res2.Val)
	fmt.Println("Result:", res1.Val)

	// Output:
	// Shared: true
	// Equal results: true
	// Result: func 1
}

// Forget loses the running flight's lease: its fn sees the loss in sig and
// in its context, and the next call starts a flight of its own.
func ExampleGroup_Forget() {
	var g singleflight.Group[int]
	running, finish := make(chan struct{}), make(chan struct{})
	old := g.DoChan(context.Background(), "key", func(ctx context.Context, sig *signal.Signal) (int, error) {
		close(running)
		<-ctx.Done() // cut by the loss, as a call made with ctx is
		<-finish
		return 1, sig.Err()
	})
	<-running
	g.Forget("key")
	v, err, _ := g.Do(context.Background(), "key", func(ctx context.Context, sig *signal.Signal) (int, error) {
		return 2, sig.Err()
	})
	fmt.Println("new flight:", v, err)
	close(finish)
	r := <-old
	fmt.Println("old flight:", r.Val, r.Err)
	// Output:
	// new flight: 2 <nil>
	// old flight: 1 lease lost: key: singleflight: flight forgotten
}

// Forget called inside fn, a common use of x/sync's Forget (the next caller
// starts afresh rather than join a flight about to finish), forgets fn's
// own flight: its lease is lost at once, so fn's own check of sig.Err()
// before its write finds the loss. A fn that means to finish its write
// calls Forget after it.
func ExampleGroup_Forget_insideFn() {
	var g singleflight.Group[string]
	cache := map[string]string{}
	v, err, _ := g.Do(context.Background(), "user:1", func(ctx context.Context, sig *signal.Signal) (string, error) {
		g.Forget("user:1")
		if err := sig.Err(); err != nil {
			return "", err // the write below is skipped
		}
		cache["user:1"] = "v1"
		return "v1", nil
	})
	fmt.Println("Forget before the write:", v == "", errors.Is(err, singleflight.ErrForgotten), len(cache))

	v, err, _ = g.Do(context.Background(), "user:1", func(ctx context.Context, sig *signal.Signal) (string, error) {
		if err := sig.Err(); err != nil {
			return "", err
		}
		cache["user:1"] = "v1"
		g.Forget("user:1") // after the write: the next caller starts afresh
		return "v1", nil
	})
	fmt.Println("Forget after the write:", v, err, cache["user:1"])
	// Output:
	// Forget before the write: true true 0
	// Forget after the write: v1 <nil> v1
}
