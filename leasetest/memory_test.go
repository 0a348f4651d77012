package leasetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/leasetest"
	"github.com/zukhruf/lease/lost"
)

var errRevoked = errors.New("revoked by the test")

// memoryHarness runs the suite on one Memory: its Lockers are one
// coordinator, as two clients of one server are.
func memoryHarness() (*leasetest.Memory, leasetest.Harness) {
	m := new(leasetest.Memory)
	return m, leasetest.Harness{
		NewLocker: func(*testing.T) lease.Locker { return m },
		Revoke: func(_ context.Context, subject string) error {
			if !m.Lose(subject, errRevoked) {
				return errors.New("no lease held on " + subject)
			}
			return nil
		},
	}
}

func TestMemoryConforms(t *testing.T) {
	_, h := memoryHarness()
	leasetest.Run(t, h)
}

func TestMemoryLose(t *testing.T) {
	var m leasetest.Memory
	ctx := context.Background()
	if m.Lose("free", errRevoked) {
		t.Error(`Lose("free") = true with no lease held, want false`)
	}
	ls, err := m.Lock(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if !m.Lose("s", nil) {
		t.Fatal(`Lose("s") = false with a lease held, want true`)
	}
	var le *lost.Error
	if !errors.As(ls.Signal().Err(), &le) || le.Subject() != "s" || le.Unwrap() != nil {
		t.Errorf("Err() = %v, want a *lost.Error on \"s\" with no cause", ls.Signal().Err())
	}
	next, err := m.TryLock(ctx, "s")
	if err != nil {
		t.Fatalf("TryLock after Lose = %v, want the subject free", err)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the lost lease = %v", err)
	}
	if _, err := m.TryLock(ctx, "s"); !errors.Is(err, lease.ErrHeld) {
		t.Errorf("the lost lease's Unlock freed the next holder's subject: TryLock = %v", err)
	}
	if err := next.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

func TestMemoryFailNext(t *testing.T) {
	var m leasetest.Memory
	ctx := context.Background()
	refused, down := errors.New("refused"), errors.New("down")
	m.FailNext(refused)
	m.FailNext(down)
	if _, err := m.Lock(ctx, "s"); err != refused {
		t.Errorf("first Lock = %v, want %v", err, refused)
	}
	if _, err := m.TryLock(ctx, "s"); err != down {
		t.Errorf("second call = %v, want %v", err, down)
	}
	ls, err := m.Lock(ctx, "s")
	if err != nil {
		t.Fatalf("third Lock = %v, want a lease", err)
	}
	_ = ls.Unlock(ctx)
}

func TestMemoryPause(t *testing.T) {
	var m leasetest.Memory
	ctx := context.Background()
	resume := m.Pause("s")
	if _, err := m.TryLock(ctx, "s"); !errors.Is(err, lease.ErrHeld) {
		t.Errorf("TryLock of a paused subject = %v, want lease.ErrHeld", err)
	}
	got := make(chan lease.Lease)
	go func() {
		ls, err := m.Lock(ctx, "s")
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	for m.Waiting("s") == 0 {
		time.Sleep(time.Millisecond)
	}
	resume()
	resume() // a second call does nothing
	ls := <-got
	if m.Waiting("s") != 0 {
		t.Errorf("Waiting = %d after the grant, want 0", m.Waiting("s"))
	}
	_ = ls.Unlock(ctx)
}

func TestMemoryMisuse(t *testing.T) {
	var m leasetest.Memory
	for name, f := range map[string]func(){
		//lint:ignore SA1012 the misuse under test
		"Lock":     func() { m.Lock(nil, "s") },
		"FailNext": func() { m.FailNext(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		})
	}
}
