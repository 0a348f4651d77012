package redisfence_test

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/fencing/redisfence"
)

// A holder raises the fence right after Lock, then writes under it.
func ExampleFence_Set() {
	run := func(ctx context.Context, locker lease.Locker, rdb *redis.Client) error {
		l, err := locker.Lock(ctx, "invoice-42")
		if err != nil {
			return err
		}
		defer l.Unlock(ctx)
		f := redisfence.Fence{Client: rdb}
		if err := f.Advance(ctx, "invoice-42:rows", l.Token()); err != nil {
			return err // a newer holder already wrote
		}
		err = f.Set(ctx, "invoice-42:rows", l.Token(), "paid")
		if errors.Is(err, fencing.ErrStale) {
			return err // paused past the lease: nothing was written
		}
		return err
	}
	_ = run
}
