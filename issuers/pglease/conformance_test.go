package pglease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/leasetest"
)

// TestConformance runs the conformance suite of every issuer on the shared
// server: each Locker has a pool of its own, and Revoke terminates the
// backend that holds the subject's lock, as an operator does.
func TestConformance(t *testing.T) {
	admin := connect(t, server, server.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// The suite checks that tokens increase, and a lock has none without a
	// fencing table.
	if _, err := admin.Exec(ctx, "create table if not exists conformance_tokens (key bigint primary key, token bigint not null)"); err != nil {
		t.Fatalf("create the fencing table: %v", err)
	}
	cfg := pglease.Config{Fence: pgx.Identifier{"conformance_tokens"}}
	var mu sync.Mutex // admin is one connection
	leasetest.Run(t, leasetest.Harness{
		NewLocker: func(t *testing.T) lease.Locker {
			return pglease.NewLocker(newPool(t, server, server.Addr()), cfg)
		},
		Revoke: func(ctx context.Context, subject string) error {
			mu.Lock()
			defer mu.Unlock()
			return revoke(ctx, admin, cfg.Key(subject))
		},
		// A waiter blocked in pg_advisory_lock is granted by the server at
		// the release, which Unlock makes after at most Deadline for the
		// heartbeats' replies and Deadline for pg_advisory_unlock, or else
		// by closing the session, which the server sees at once here. A
		// terminate reaches the holder by push, in milliseconds.
		HandOver: 2*pglease.DefaultDeadline + time.Second,
		// A shared session outlives its pool by a few heartbeats: a closed
		// pool says nothing, and the session closes once it has had no
		// lease for idleLinger heartbeats.
		Goroutines: []goleak.Option{goleak.IgnoreAnyFunction("github.com/zukhruf/lease/issuers/pglease.(*shared).follow"),
			goleak.IgnoreTopFunction("github.com/zukhruf/lease/issuers/pglease.(*shared).keep")},
	})
}

// revoke terminates the backend that holds the advisory lock of key and
// returns once it has exited, which frees the lock.
func revoke(ctx context.Context, admin *pgx.Conn, key int64) error {
	const wait = 10 * time.Second // pg_terminate_backend's wait for the exit
	u := uint64(key)
	rows, err := admin.Query(ctx, "select pid, pg_terminate_backend(pid, $3) from pg_locks "+
		"where locktype = 'advisory' and granted and classid = $1 and objid = $2 and objsubid = 1",
		uint32(u>>32), uint32(u), wait.Milliseconds())
	if err != nil {
		return err
	}
	type ended struct {
		PID  int32
		Gone bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ended])
	switch {
	case err != nil:
		return err
	case len(got) != 1:
		return fmt.Errorf("%d backends hold the lock of key %d, want 1", len(got), key)
	case !got[0].Gone:
		return fmt.Errorf("backend %d, the holder of the lock of key %d, did not exit within %v of pg_terminate_backend", got[0].PID, key, wait)
	}
	return nil
}
