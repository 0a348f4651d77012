package redislease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/redislease"
)

// Lock with the default Config: a 10 s TTL, renewed every 3.3 s.
func ExampleLock() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	l, err := redislease.Lock(ctx, rdb, "example:lock")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Unlock(ctx)
	fmt.Println("held:", l.Signal().Err() == nil, "token > 0:", l.Token() > 0)
	// Output: held: true token > 0: true
}

// An operator deletes the key: the holder is told at once, with the cause.
func ExampleConfig_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	l, err := redislease.Config{TTL: 2 * time.Second}.Lock(ctx, rdb, "example:orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Unlock(ctx)
	rdb.Del(ctx, "example:orders")
	<-l.Signal().Done()
	fmt.Println(errors.Is(l.Signal().Err(), redislease.ErrDeleted))
	// Output: true
}

// Unlock ends the signal first: the release is never a loss.
func ExampleLease_Unlock() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	l, err := redislease.Lock(ctx, rdb, "example:unlock")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(l.Unlock(ctx), l.Signal().Err())
	n, _ := rdb.Exists(ctx, "example:unlock").Result()
	fmt.Println("keys left:", n)
	// Output:
	// <nil> <nil>
	// keys left: 0
}

// A Locker is the lease.TryLocker of one client and Config: code written
// against lease.Locker runs on Redis as on any other issuer.
func ExampleNewLocker() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	var locker lease.TryLocker = redislease.NewLocker(rdb, redislease.Config{TTL: 2 * time.Second})
	l, err := locker.Lock(ctx, "example:locker")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := l.Signal().Err(); err != nil {
		fmt.Println(err) // lost: do not write
		return
	}
	_, err = locker.TryLock(ctx, "example:locker")
	fmt.Println("TryLock while held:", errors.Is(err, lease.ErrHeld))
	fmt.Println(l.Unlock(ctx))
	// Output:
	// TryLock while held: true
	// <nil>
}
