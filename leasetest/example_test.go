package leasetest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/leasetest"
)

// writeBatch is the code under test: a holder checks its lease before each
// write and sends the lease's token with it.
func writeBatch(l lease.Lease, batch string) error {
	if err := l.Signal().Err(); err != nil {
		return fmt.Errorf("batch %s not written: %w", batch, err)
	}
	fmt.Printf("wrote batch %s with token %d\n", batch, l.Token())
	return nil
}

// A holder's loss path, tested with no server: the test takes the lease
// away between two writes, as a coordinator would.
func ExampleMemory_Lose() {
	var coordinator leasetest.Memory
	ctx := context.Background()
	l, err := coordinator.Lock(ctx, "copy-rows")
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)

	fmt.Println(writeBatch(l, "1"))
	coordinator.Lose("copy-rows", errors.New("the operator took the job"))
	<-l.Signal().Done()
	fmt.Println(writeBatch(l, "2"))
	// Output:
	// wrote batch 1 with token 1
	// <nil>
	// batch 2 not written: lease lost: copy-rows: the operator took the job
}

// FailNext makes the coordinator refuse the next Lock, to test a holder's
// error path.
func ExampleMemory_FailNext() {
	var coordinator leasetest.Memory
	coordinator.FailNext(errors.New("permission denied"))
	_, err := coordinator.Lock(context.Background(), "copy-rows")
	fmt.Println(err)
	// Output: permission denied
}

// TryLock takes a subject only if it is free now: a job that must not run
// twice skips its turn instead of waiting.
func ExampleMemory_TryLock() {
	var coordinator leasetest.Memory
	ctx := context.Background()
	first, _ := coordinator.TryLock(ctx, "nightly-report")
	_, err := coordinator.TryLock(ctx, "nightly-report")
	fmt.Println(errors.Is(err, lease.ErrHeld))
	_ = first.Unlock(ctx)
	// Output: true
}
