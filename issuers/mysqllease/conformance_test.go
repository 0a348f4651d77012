package mysqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/mysqllease"
	"github.com/zukhruf/lease/leasetest"
)

// TestConformance runs the conformance suite of every issuer on the shared
// server, with the default Config and a fencing table: a Locker of its own
// pool for each client, and an operator's KILL CONNECTION of the lock's
// session for the revocation.
func TestConformance(t *testing.T) {
	// The operator's pool is closed by the defer, before the suite's
	// cleanup looks for goroutines left: the driver keeps one for each open
	// connection.
	admin, err := sql.Open("mysql", server.DSN("root", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	cfg := mysqllease.Config{Fence: createFence(t, admin)}
	leasetest.Run(t, leasetest.Harness{
		NewLocker: func(t *testing.T) lease.Locker {
			return mysqllease.NewLocker(rootDB(t, server), cfg)
		},
		Revoke: func(ctx context.Context, subject string) error {
			return killHolder(ctx, admin, cfg, subject)
		},
		// The push reads a KILL in under 10 ms and an Unlock hands over in
		// about 1 ms (the README's fault trials); 2 s leaves room for a
		// loaded machine and the race detector.
		HandOver: 2 * time.Second,
	})
}

// killHolder kills the session that holds the lock of subject, through a
// connection of admin, and returns once the server has freed the lock.
func killHolder(ctx context.Context, admin *sql.DB, cfg mysqllease.Config, subject string) error {
	name, err := cfg.LockName(subject)
	if err != nil {
		return err
	}
	var id sql.NullInt64
	if err := admin.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
		return err
	}
	if !id.Valid {
		return fmt.Errorf("no session holds the lock %q", name)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id.Int64)); err != nil {
		return err
	}
	for {
		var now sql.NullInt64
		if err := admin.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&now); err != nil {
			return err
		}
		if now != id {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("the killed session still holds the lock")
		case <-time.After(time.Millisecond):
		}
	}
}
