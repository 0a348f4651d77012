package redislease_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestDbgMany(t *testing.T) {
	rdb := client(t, shared.Addr())
	var ls []interface{ Unlock(context.Context) error }
	var first error
	n := 1000
	leases := make([]*struct{}, 0)
	_ = leases
	for i := 0; i < n; i++ {
		l, err := short.Lock(t.Context(), rdb, fmt.Sprintf("dbg-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		defer func() {
			if first == nil && l.Signal().Err() != nil {
				first = l.Signal().Err()
				t.Log(first)
			}
		}()
	}
	time.Sleep(3 * time.Second)
	for _, l := range ls {
		l.Unlock(context.Background())
	}
}
