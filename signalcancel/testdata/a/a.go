// Copyright 2016 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in LICENSE.x-tools beside this module.
//
// The cases of go vet's lostcancel testdata (golang.org/x/tools,
// go/analysis/passes/lostcancel/testdata/src/a/a.go), with Signal.Context
// and signal.Any in place of context.WithCancel, WithTimeout and WithDeadline.

package a

import (
	"context"
	"log"
	"os"
	"testing"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

var bg = context.Background()

var sig = controller.New("orders").Signal()

// Check the two calls and the assignment forms (var, :=, =) we look for.
// (Do these early: line numbers are fragile.)
func _() {
	var _, cancel = sig.Context(bg) // want `the cancel function is not used on all paths \(possible context leak\)`
	if false {
		_ = cancel
	}
} // want "this return statement may be reached without using the cancel var defined on line 28"

func _() {
	_, release := signal.Any(sig) // want `the release function is not used on all paths \(possible signal leak\)`
	if false {
		_ = release
	}
} // want "may be reached without using the release var defined on line 35"

func _() {
	var cancel3 context.CancelFunc
	_, cancel3 = sig.Context(bg) // want "function is not used..."
	if false {
		_ = cancel3
	}
} // want "this return statement may be reached without using the cancel3 var defined on line 43"

func _() {
	ctx, _ := sig.Context(bg)    // want "the cancel function returned by Signal.Context should be called, not discarded, to avoid a context leak"
	ctx, _ = sig.Context(ctx)    // want "the cancel function returned by Signal.Context should be called, not discarded, to avoid a context leak"
	merged, _ := signal.Any(sig) // want "the release function returned by signal.Any should be called, not discarded, to avoid a signal leak"
	_, _ = ctx, merged
}

func _() {
	_, cancel := sig.Context(bg)
	defer cancel() // ok
}

func _() {
	_, release := signal.Any(sig)
	defer release() // ok
}

func _() {
	_, cancel := sig.Context(bg) // want "not used on all paths"
	if condition {
		cancel()
	}
	return // want "this return statement may be reached without using the cancel var"
}

func _() {
	_, cancel := sig.Context(bg)
	if condition {
		cancel()
	} else {
		// ok: infinite loop
		for {
			print(0)
		}
	}
}

func _() {
	_, cancel := sig.Context(bg) // want "not used on all paths"
	if condition {
		cancel()
	} else {
		for i := 0; i < 10; i++ {
			print(0)
		}
	}
} // want "this return statement may be reached without using the cancel var"

func _() {
	_, cancel := sig.Context(bg)
	// ok: used on all paths
	switch someInt {
	case 0:
		new(testing.T).FailNow()
	case 1:
		log.Fatal()
	case 2:
		cancel()
	case 3:
		print("hi")
		fallthrough
	default:
		os.Exit(1)
	}
}

func _() {
	_, cancel := sig.Context(bg) // want "not used on all paths"
	switch someInt {
	case 0:
		new(testing.T).FailNow()
	case 1:
		log.Fatal()
	case 2:
		cancel()
	case 3:
		print("hi") // falls through to implicit return
	default:
		os.Exit(1)
	}
} // want "this return statement may be reached without using the cancel var"

func _(ch chan int) {
	_, cancel := sig.Context(bg) // want "not used on all paths"
	select {
	case <-ch:
		new(testing.T).FailNow()
	case ch <- 2:
		print("hi") // falls through to implicit return
	case ch <- 1:
		cancel()
	default:
		os.Exit(1)
	}
} // want "this return statement may be reached without using the cancel var"

func _(ch chan int) {
	_, cancel := sig.Context(bg)
	// A blocking select must execute one of its cases.
	select {
	case <-ch:
		panic(0)
	}
	if false {
		_ = cancel
	}
}

func _() {
	go func() {
		ctx, cancel := sig.Context(bg) // want "not used on all paths"
		if false {
			_ = cancel
		}
		print(ctx)
	}() // want "may be reached without using the cancel var"
}

var condition bool
var someInt int

// The cancel of a signal reached through a controller, without naming
// package signal.
func _(c *controller.Controller) {
	_, cancel := c.Signal().Context(bg) // want "not used on all paths"
	if condition {
		cancel()
	}
} // want "may be reached without using the cancel var"

// A naked return counts as a load of the named result values.
func _() (ctx context.Context, cancel context.CancelFunc) {
	ctx, cancel = sig.Context(bg)
	return
}

// Same as above, but for literal function.
var _ = func() (ctx context.Context, cancel context.CancelFunc) {
	ctx, cancel = sig.Context(bg)
	return
}

// Test for Go issue 31856.
func _() {
	var cancel func()

	func() {
		_, cancel = sig.Context(bg)
	}()

	cancel()
}

var cancel1 func()

// Same as above, but for package-level cancel variable.
func _() {
	// We assume that other uses of cancel1 exist.
	_, cancel1 = sig.Context(bg)
}

// Returning from main.main ends the process: no report (see package b).
