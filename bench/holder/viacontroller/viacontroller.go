// Package viacontroller is a holder that imports only package controller and
// reaches the signal through it, as an issuer's own code does. Inlining across
// such an indirect import is where it breaks first, so TestInlining checks
// this package as well.
//
// A line whose call must be inlined carries a comment "// inlined: " followed
// by the callee as the compiler names it.
package viacontroller

import "github.com/zukhruf/lease/controller"

// ErrLoop checks the signal's Err before each of n units of work and returns
// how many it did.
//
//go:noinline
func ErrLoop(c *controller.Controller, n int) int {
	done := 0
	for range n {
		if c.Signal().Err() != nil { // inlined: signal.(*Signal).Err
			break
		}
		done++
	}
	return done
}

// DoneLoop polls the signal's Done before each of n units of work and returns
// how many it did.
//
//go:noinline
func DoneLoop(c *controller.Controller, n int) int {
	done := 0
	for range n {
		select {
		case <-c.Signal().Done(): // inlined: signal.(*Signal).Done
			return done
		default:
		}
		done++
	}
	return done
}
