package lease_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/leasetest"
)

// runOnce runs job unless another process runs it now: the code is written
// against lease.TryLocker, so it runs on any issuer (here the in-memory one
// of leasetest).
func runOnce(ctx context.Context, locker lease.TryLocker, name string, job func(context.Context, int64) error) error {
	l, err := locker.TryLock(ctx, name)
	if errors.Is(err, lease.ErrHeld) {
		fmt.Println(name, "runs elsewhere: skipped")
		return nil
	}
	if err != nil {
		return err
	}
	defer l.Unlock(ctx)
	// The job's calls end at the loss; its writes carry the token.
	ctx, stop := l.Signal().Context(ctx)
	defer stop()
	return job(ctx, l.Token())
}

func Example() {
	var coordinator leasetest.Memory
	ctx := context.Background()
	report := func(ctx context.Context, token int64) error {
		fmt.Println("report written with token", token)
		// A second instance starts while this one runs.
		return runOnce(ctx, &coordinator, "nightly-report", nil)
	}
	if err := runOnce(ctx, &coordinator, "nightly-report", report); err != nil {
		fmt.Println(err)
	}
	// Output:
	// report written with token 1
	// nightly-report runs elsewhere: skipped
}
