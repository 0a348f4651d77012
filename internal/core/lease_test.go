package core

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestSetCause fails if errorFields stops matching lost.Error field for
// field: the size check catches a field added or removed, this an order
// changed.
func TestSetCause(t *testing.T) {
	l := New("orders")
	cause := errors.New("the coordinator refused the claim")
	l.setCause(cause)
	if got := l.err.Subject(); got != "orders" {
		t.Errorf("Subject() after setCause = %q, want %q", got, "orders")
	}
	if got := l.err.Unwrap(); got != cause {
		t.Errorf("Unwrap() after setCause = %v, want %v", got, cause)
	}
}

// TestMergedOnlyByAny: an issuer's subject that reads like the merged
// lease's is an ordinary subject. (mergedSubject itself never leaves the
// package: a merged lease reports its sources' subjects and errors.)
func TestMergedOnlyByAny(t *testing.T) {
	if New("merged").isMerged() {
		t.Error(`New("merged").isMerged() = true, want false`)
	}
	m, release := Any(0, nil)
	defer release()
	if !m.isMerged() {
		t.Error("Any(...).isMerged() = false, want true")
	}
}

// TestLoseTakesNoLockBeforeDone: while the mutex is held, as a holder's
// registration or stop holds it, a Lose still closes Done and Err shows the
// loss; it takes the mutex only afterwards, to fire what is registered.
func TestLoseTakesNoLockBeforeDone(t *testing.T) {
	l := New("orders")
	ran := make(chan struct{})
	l.AfterLoss(func() { close(ran) })
	cause := errors.New("the coordinator refused the claim")

	l.mu.Lock()
	returned := make(chan bool)
	go func() { returned <- l.Lose(cause) }()
	select {
	case <-l.Done():
	case <-time.After(time.Minute):
		l.mu.Unlock()
		t.Fatal("Done not closed while the mutex was held: Lose waits for the mutex")
	}
	if err := l.Err(); err == nil || !errors.Is(err, cause) {
		t.Errorf("Err() with the mutex held = %v, want the loss", err)
	}
	l.mu.Unlock()
	if !<-returned {
		t.Error("Lose() = false, want true")
	}
	<-ran
}

// TestAwaitLossMakesNoChannel: an Err, Lose, End or stop that finds a loss
// under way waits for it without making the Done channel, so Err never
// allocates. With one P, the rest of the loss runs only once the call
// yields, so the call finds the lease losing with no channel yet; a call
// that waited through Done would make one, and the loss would close it
// instead of putting the shared closedchan in place.
func TestAwaitLossMakesNoChannel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cause := errors.New("the coordinator refused the claim")
	calls := []struct {
		name string
		call func(l *Lease, stop func() bool) (lost bool)
	}{
		{"Err", func(l *Lease, _ func() bool) bool { return l.Err() != nil }},
		{"Lose", func(l *Lease, _ func() bool) bool { return !l.Lose(errors.New("a later loss")) }},
		{"End", func(l *Lease, _ func() bool) bool { return !l.End() }},
		{"stop", func(_ *Lease, stop func() bool) bool { return !stop() }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			l := New("orders")
			ran := make(chan struct{})
			stop := l.AfterLoss(func() { close(ran) })
			if !l.state.cas(stateLive, stateLosing) {
				t.Fatal("a new lease is not live")
			}
			go l.completeLoss(cause) // runs when the call below yields
			if !c.call(l, stop) {
				t.Errorf("%s on a losing lease reports it live", c.name)
			}
			if s := l.state.load(); s != stateLost {
				t.Errorf("%s returned with the state %d, want lost (%d)", c.name, s, stateLost)
			}
			if l.loadDone() != closedchan {
				t.Errorf("%s on a losing lease made a Done channel", c.name)
			}
			if err := l.Err(); !errors.Is(err, cause) {
				t.Errorf("Err() = %v, want the loss", err)
			}
			<-ran
		})
	}
}

// BenchmarkProcHint is the cost of the hint that picks a registration's
// shard: the runtime's procPin and procUnpin (see shard.go).
func BenchmarkProcHint(b *testing.B) {
	n := 0
	for b.Loop() {
		n += procHint()
	}
	if n < 0 {
		b.Fatal("a negative P")
	}
}

// TestContextAfterLossNotFromRegistryBeingTakenOff: a registration that
// found the lease live under the mutex, and made the registry and its lease
// context after a Lose that found no registry had returned, holds the mutex
// until it takes that registry off again and cancels the context. A Context
// made from Background meanwhile, after that Lose returned, must not become
// a child of that lease context while it is still live: it comes after the
// loss and is done when it is returned, as a context.WithCancel of a
// cancelled parent is. The registration is played step by step here, as
// context and unlockRegistered make it, on one P, so that the lease context
// is the caller's core's.
func TestContextAfterLossNotFromRegistryBeingTakenOff(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l := New("orders")
	cause := errors.New("the coordinator refused the claim")

	// The registration found the lease live under the mutex...
	l.mu.Lock()
	// ...then the loss came, with nothing registered yet...
	if !l.Lose(cause) {
		t.Fatal("Lose of a live lease = false")
	}
	// ...and the registration made the registry and its lease context.
	r, made := l.registry()
	lc := r.leaseContext()
	l.mu.Unlock() // released here so that a correct Context can take the mutex and see the loss

	ctx, cancel := l.WithCancel(context.Background())
	defer cancel()
	if ctx.Err() == nil {
		t.Errorf("Context(Background) after Lose returned: Err() = nil, want the loss")
	}

	// The registration ends as unlockRegistered ends it.
	l.mu.Lock()
	if !l.unlockRegistered(made) {
		t.Fatal("unlockRegistered after a loss = false, want true")
	}
	if !errors.Is(context.Cause(lc.ctx), cause) {
		t.Errorf("the registration's lease context: Cause() = %v, want the loss", context.Cause(lc.ctx))
	}
}
