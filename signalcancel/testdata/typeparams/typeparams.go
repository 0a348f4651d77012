// Copyright 2021 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in LICENSE.x-tools beside this module.
//
// The cases of go vet's lostcancel testdata
// (go/analysis/passes/lostcancel/testdata/src/typeparams/typeparams.go),
// with Signal.Context in place of package context's funcs.

package typeparams

import (
	"context"
	"time"

	"github.com/zukhruf/lease/controller"
)

var bg = context.Background()

var sig = controller.New("orders").Signal()

func _[T any]() {
	var _, cancel = sig.Context(bg) // want `the cancel function is not used on all paths \(possible context leak\)`
	if false {
		_ = cancel
	}
} // want "this return statement may be reached without using the cancel var defined on line 23"

func _[T any]() {
	_, cancel := sig.Context(bg)
	defer cancel() // ok
}

// User-defined Context that matches type "context.Context"
type C1[P1 any, P2 any] interface {
	Deadline() (deadline time.Time, ok P1)
	Done() <-chan struct{}
	Err() error
	Value(key P2) P2
}

func _(bg C1[bool, interface{}]) {
	ctx, _ := sig.Context(bg) // want "the cancel function returned by Signal.Context should be called, not discarded, to avoid a context leak"
	ctx, _ = sig.Context(ctx) // want "the cancel function returned by Signal.Context should be called, not discarded, to avoid a context leak"
	_ = ctx
}

// User-defined Context that doesn't match type "*signal.Signal"
type C2[P any] interface {
	Context(parent C1[P, bool]) (ctx C1[P, bool], cancel func())
}

func _(c C2[interface{}]) {
	ctx, _ := c.Context(nil) // not "(*signal.Signal).Context()"
	_ = ctx
}

// Further regression test for Go issue 16143.
func _() {
	type C[P any] struct{ f func() P }
	var x C[int]
	x.f()
}

func withCancel(maybe bool) {
	{
		_, cancel := sig.Context(bg)
		defer cancel() // ok
	}
	{
		_, cancel := sig.Context(bg) // want "the cancel function is not used on all paths \\(possible context leak\\)"
		if maybe {
			cancel()
		}
	}
} // want "this return statement may be reached without using the cancel var defined on line 71"
