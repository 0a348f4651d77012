// Package holder is written the way a holder of a lease writes its hot loop:
// a check of the signal before each unit of work. The benchmarks time these
// loops, and TestInlining builds this package with -gcflags=-m to check that
// the lease's Err and Done are inlined into them.
//
// A line whose call must be inlined carries a comment "// inlined: " followed
// by the callee as the compiler names it.
package holder

import (
	"context"

	"github.com/zukhruf/lease/bench/handrolled"
	"github.com/zukhruf/lease/signal"
)

// The loops below are not inlined into their callers, so that each is timed
// as the compiled loop a holder would have; the checks inside them are.

// ErrLoopLease checks s.Err before each of n units of work and returns how
// many it did.
//
//go:noinline
func ErrLoopLease(s *signal.Signal, n int) int {
	done := 0
	for range n {
		if s.Err() != nil { // inlined: signal.(*Signal).Err
			break
		}
		done++
	}
	return done
}

// ErrLoopContext is ErrLoopLease for a context.
//
//go:noinline
func ErrLoopContext(ctx context.Context, n int) int {
	done := 0
	for range n {
		if ctx.Err() != nil {
			break
		}
		done++
	}
	return done
}

// ErrLoopHandrolled is ErrLoopLease for a hand-rolled signal.
//
//go:noinline
func ErrLoopHandrolled(s *handrolled.Signal, n int) int {
	done := 0
	for range n {
		if s.Err() != nil {
			break
		}
		done++
	}
	return done
}

// DoneLoopLease polls s.Done in a select before each of n units of work, as
// a holder that also waits on other channels does, and returns how many it
// did.
//
//go:noinline
func DoneLoopLease(s *signal.Signal, n int) int {
	done := 0
	for range n {
		select {
		case <-s.Done(): // inlined: signal.(*Signal).Done
			return done
		default:
		}
		done++
	}
	return done
}

// DoneLoopContext is DoneLoopLease for a context.
//
//go:noinline
func DoneLoopContext(ctx context.Context, n int) int {
	done := 0
	for range n {
		select {
		case <-ctx.Done():
			return done
		default:
		}
		done++
	}
	return done
}

// DoneLoopHandrolled is DoneLoopLease for a hand-rolled signal.
//
//go:noinline
func DoneLoopHandrolled(s *handrolled.Signal, n int) int {
	done := 0
	for range n {
		select {
		case <-s.Done():
			return done
		default:
		}
		done++
	}
	return done
}
