package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/pglease"
)

// TestSameProcessOrdered terminates A's backend while B, a lease of the same
// process on the same lock, waits: the server frees the lock before A reads
// its FATAL, yet B's Lock returns only after A's signal is lost.
func TestSameProcessOrdered(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	for i := range 20 {
		subject := fmt.Sprintf("ordered-%d", i)
		la := lock(t, fast, pool, subject)
		aPID := holder(t, admin, la.Key())
		ch := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			lb, err := fast.Lock(ctx, pool, subject)
			if err != nil {
				ch <- err
				return
			}
			aErr := la.Signal().Err() // read as B's Lock returns
			unlockErr := lb.Unlock(ctx)
			switch {
			case aErr == nil:
				ch <- fmt.Errorf("B's Lock returned while A was live")
			case unlockErr != nil:
				ch <- unlockErr
			default:
				ch <- nil
			}
		}()
		waitWaiting(t, admin, la.Key())
		terminate(t, admin, aPID)
		if err := <-ch; err != nil {
			t.Fatalf("trial %d: %v", i, err)
		}
		la.Unlock(context.Background())
	}
}

// TestMutualExclusion runs 4 holders × 100 rounds on one lock, each holder
// on its own connection in this process: no two hold it at once, and no
// advisory lock is left on the server.
func TestMutualExclusion(t *testing.T) {
	const holders, rounds = 4, 100
	admin := connect(t, server, server.Addr())
	var inside, overlaps, total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, holders)
	pool := newPool(t, server, server.Addr())
	for h := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				l, err := fast.Lock(ctx, pool, "exclusive")
				if err != nil {
					cancel()
					errs <- fmt.Errorf("holder %d: %w", h, err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				total.Add(1)
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				err = l.Unlock(ctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("holder %d: %w", h, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlaps in %d grants, want 0", n, total.Load())
	}
	if n := total.Load(); n != holders*rounds {
		t.Errorf("%d grants, want %d", n, holders*rounds)
	}
	if n := keyLocks(t, admin, pglease.Key("exclusive")); n != 0 {
		t.Errorf("%d advisory locks left, want 0", n)
	}
}

// TestFenceRefusesStaleWrite takes the fencing token at each grant and
// guards a write with it: a holder whose lease was lost, writing with its
// old token through another connection, is refused; the new holder's write
// passes.
func TestFenceRefusesStaleWrite(t *testing.T) {
	admin := connect(t, server, server.Addr())
	ctx := context.Background()
	for _, q := range []string{
		"create table lease_tokens (key bigint primary key, token bigint not null)",
		"create table accounts (id int primary key, balance int not null)",
		"insert into accounts values (1, 0)",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec(ctx, "drop table lease_tokens, accounts") })
	cfg := fast
	cfg.Fence = []string{"lease_tokens"}
	// write is the guarded write of the README: it passes only if token is
	// the lock's latest.
	write := func(token, balance int64) int64 {
		tag, err := admin.Exec(ctx, `update accounts set balance = $3 where id = 1 and
			(select token from lease_tokens where key = $1 for share) = $2`, pglease.Key("accounts"), token, balance)
		if err != nil {
			t.Fatal(err)
		}
		return tag.RowsAffected()
	}
	pool := newPool(t, server, server.Addr())
	la := lock(t, cfg, pool, "accounts")
	if la.Token() != 1 {
		t.Errorf("A's Token() = %d, want 1", la.Token())
	}
	if n := write(la.Token(), 10); n != 1 {
		t.Fatalf("A's write while it holds the lock: %d rows, want 1", n)
	}
	terminate(t, admin, holder(t, admin, la.Key()))
	waitLost(t, la)
	lb := lock(t, cfg, pool, "accounts")
	if lb.Token() <= la.Token() {
		t.Errorf("B's Token() = %d, want more than A's %d", lb.Token(), la.Token())
	}
	if n := write(la.Token(), 20); n != 0 {
		t.Errorf("A's stale write: %d rows, want 0 (refused)", n)
	}
	if n := write(lb.Token(), 30); n != 1 {
		t.Errorf("B's write: %d rows, want 1", n)
	}
	var balance int
	if err := admin.QueryRow(ctx, "select balance from accounts where id = 1").Scan(&balance); err != nil || balance != 30 {
		t.Errorf("balance = %d, %v; want 30", balance, err)
	}
	unlock(t, lb)
}

// TestLockWaitsForTheProcesssLease has the server grant B's Lock while a
// lease of this process is recorded live on the same lock, as happens
// between the server freeing a lost holder's lock and that holder reading
// why: B's Lock returns only once the record ends, or, cut by its context
// first, gives the lock back and leaves its connection usable.
func TestLockWaitsForTheProcesssLease(t *testing.T) {
	admin := connect(t, server, server.Addr())
	b := newPool(t, server, server.Addr())
	ctx := context.Background()
	key := pglease.Key("recorded")
	end, err := pglease.Claim(ctx, admin, key)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := fast.Lock(cctx, b, "recorded"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while the process's lease is live = %v, want context.DeadlineExceeded", err)
	}
	if n := keyLocks(t, admin, key); n != 0 {
		t.Errorf("%d advisory locks after the cut Lock, want 0", n)
	}
	var ended atomic.Bool
	go func() {
		time.Sleep(100 * time.Millisecond)
		ended.Store(true)
		end()
	}()
	l := lock(t, fast, b, "recorded")
	if !ended.Load() {
		t.Error("Lock returned while the process's lease was live")
	}
	unlock(t, l)
}

// TestFenceWaitsForWrite has a guarded write hold the token's row FOR SHARE
// in an open transaction while the lock passes from A to B: B's Lock waits
// for that transaction, longer than a deadline, before it takes its token,
// so the write commits under A's token; B's lease then starts live.
func TestFenceWaitsForWrite(t *testing.T) {
	admin := connect(t, server, server.Addr())
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "create table write_tokens (key bigint primary key, token bigint not null)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(ctx, "drop table write_tokens") })
	cfg := fast
	cfg.Fence = []string{"write_tokens"}
	pool := newPool(t, server, server.Addr())
	writer := connect(t, server, server.Addr())
	la := lock(t, cfg, pool, "write")
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var passed bool
	if err := tx.QueryRow(ctx, "select (select token from write_tokens where key = $1 for share) = $2",
		la.Key(), la.Token()).Scan(&passed); err != nil || !passed {
		t.Fatalf("A's guard in the open transaction = %v, %v; want true", passed, err)
	}
	ch := make(chan granted, 1)
	go func() {
		l, err := cfg.Lock(ctx, pool, "write")
		ch <- granted{l, err, time.Now()}
	}()
	terminate(t, admin, holder(t, admin, la.Key()))
	waitLost(t, la)
	// B holds the lock and waits for the write's transaction on the
	// token's row.
	waitRowWait(t, admin)
	// The write's transaction outlasts a deadline: the wait for the token
	// is a wait for the grant, and does not count against the lease.
	time.Sleep(fast.Deadline + fast.Deadline/2)
	select {
	case g := <-ch:
		t.Fatalf("B's Lock returned (%v) while the write's transaction was open", g.err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	g := waitGranted(t, ch)
	if g.err != nil {
		t.Fatalf("B's Lock = %v", g.err)
	}
	if g.lease.Token() != la.Token()+1 {
		t.Errorf("B's Token() = %d, want %d", g.lease.Token(), la.Token()+1)
	}
	if err := g.lease.Signal().Err(); err != nil {
		t.Errorf("B's lease = %v, want live though its token waited", err)
	}
	unlock(t, g.lease)
}
