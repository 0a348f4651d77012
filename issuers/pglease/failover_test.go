package pglease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

// A failover moves the writes to a standby, which holds none of the old
// primary's advisory locks: they live in a server's memory and are neither
// copied nor replicated. The fencing table is an ordinary table, and is.

// primaryAndStandby starts a primary with the fencing table and a table to
// write to, has holder A lock subject on it with the token, and then makes
// and starts a streaming standby, whose base backup holds A's token.
func primaryAndStandby(t *testing.T, subject string) (primary, standby *pgtest.Server, la *pglease.Lease, cfg pglease.Config) {
	t.Helper()
	primary, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Close() })
	admin := connect(t, primary, primary.Addr())
	for _, q := range []string{
		"create table lease_tokens (key bigint primary key, token bigint not null)",
		"create table batches (batch text, token bigint)",
	} {
		if _, err := admin.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	// The latency trials' deadline: three of these tests run at once, each
	// with a primary and a standby, and a 1 s deadline was lost for nothing
	// under -race on 2 loaded cores.
	cfg = slow
	cfg.Fence = pgx.Identifier{"lease_tokens"}
	la = lock(t, cfg, newPool(t, primary, primary.Addr()), subject)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		la.Unlock(ctx)
	})
	standby, err = primary.StartStandby()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Close() })
	return primary, standby, la, cfg
}

// guardedWrite stores batch through c if token is subject's latest fencing
// token on that server, in one statement, and reports whether it did.
func guardedWrite(t *testing.T, c *pgx.Conn, subject string, token int64, batch string) bool {
	t.Helper()
	tag, err := c.Exec(context.Background(), `insert into batches (batch, token)
		select $3, $2 where (select token from lease_tokens where key = $1 for share) = $2`,
		pglease.Key(subject), token, batch)
	if err != nil {
		t.Fatalf("guarded write of %q: %v", batch, err)
	}
	return tag.RowsAffected() == 1
}

// TestLockRefusedOnStandby: a standby would grant the lock that A holds on
// the primary, from its own memory; Lock refuses a standby instead.
func TestLockRefusedOnStandby(t *testing.T) {
	t.Parallel()
	_, standby, la, _ := primaryAndStandby(t, "orders")
	c := connect(t, standby, standby.Addr())
	pool := newPool(t, standby, standby.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// What Lock would be given: the standby grants the lock A holds.
	var got bool
	if err := c.QueryRow(ctx, "select pg_try_advisory_lock($1::bigint)", pglease.Key("orders")).Scan(&got); err != nil || !got {
		t.Fatalf("pg_try_advisory_lock on the standby while A holds the lock on the primary = %v, %v; want true: the hazard this test is about", got, err)
	}
	if _, err := c.Exec(ctx, "select pg_advisory_unlock($1::bigint)", pglease.Key("orders")); err != nil {
		t.Fatal(err)
	}
	lb, err := fast.Lock(ctx, pool, "orders")
	if !errors.Is(err, pglease.ErrStandby) {
		if lb != nil {
			lb.Unlock(ctx)
		}
		t.Fatalf("Lock on a standby while A holds the lock on the primary = %v, %v; want ErrStandby", lb, err)
	}
	if err := la.Signal().Err(); err != nil {
		t.Errorf("A's Err() = %v, want nil: nothing happened to its session", err)
	}
}

// TestFailoverToStandby is a failover done in the safe order: the old
// primary is stopped first (a fast shutdown, which tells A), then the standby
// promoted, and B locks on it. A is lost before B can be granted; B's token
// is larger than A's, since the standby had replicated A's; and A's late
// write through the new primary, with its old token, is refused.
func TestFailoverToStandby(t *testing.T) {
	t.Parallel()
	primary, standby, la, cfg := primaryAndStandby(t, "orders")
	if err := primary.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	if err := waitLost(t, la); !isLost(err, pglease.ErrTerminated) && !isLost(err, pglease.ErrConnLost) {
		t.Errorf("A's loss at the old primary's fast shutdown = %v, want ErrTerminated (or ErrConnLost)", err)
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	data := connect(t, standby, standby.Addr())
	lb := lock(t, cfg, newPool(t, standby, standby.Addr()), "orders")
	if lb.Token() <= la.Token() {
		t.Errorf("B's Token() on the promoted standby = %d, want more than A's %d", lb.Token(), la.Token())
	}
	if guardedWrite(t, data, "orders", la.Token(), "A late") {
		t.Error("A's late write with its old token passed the guard on the new primary")
	}
	if !guardedWrite(t, data, "orders", lb.Token(), "B") {
		t.Error("B's write with its token was refused")
	}
	unlock(t, lb)
}

// TestFailoverWithOldPrimaryAlive is the unsafe order, which the lease cannot
// make safe: the standby is promoted while the old primary still runs (cut
// off from the tool that promoted, say). B, in another process's place (a
// plain pg_advisory_lock and the token taken as Lock takes it), is granted
// the lock on the new primary at once, while A's session on the old one goes
// on answering its heartbeats: A is not lost, since nothing it talks to
// knows. The fencing token refuses A's writes that reach the new primary;
// those that reach the old one are that server's split brain, out of reach
// of any lease. Within one process, a Lock on the new primary waits for A's
// lease: the process's registry keys a lock by the cluster's system
// identifier, which a promoted standby shares with its primary.
func TestFailoverWithOldPrimaryAlive(t *testing.T) {
	t.Parallel()
	primary, standby, la, cfg := primaryAndStandby(t, "orders")
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	key := pglease.Key("orders")

	// Long enough to reach the wait for A's lease on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if lb, err := cfg.Lock(ctx, newPool(t, standby, standby.Addr()), "orders"); err == nil ||
		!strings.Contains(err.Error(), "another lease of this process held the lock") {
		if lb != nil {
			unlock(t, lb)
		}
		t.Fatalf("Lock in A's process on the new primary = %v; want it held back by A's live lease", err)
	}

	b := connect(t, standby, standby.Addr())
	if _, err := b.Exec(context.Background(), "select pg_advisory_lock($1::bigint)", key); err != nil {
		t.Fatalf("B's pg_advisory_lock on the new primary: %v", err)
	}
	var bToken int64
	if err := b.QueryRow(context.Background(), `insert into lease_tokens as t (key, token) values ($1, 1)
		on conflict (key) do update set token = t.token + 1 returning token`, key).Scan(&bToken); err != nil {
		t.Fatal(err)
	}
	if bToken <= la.Token() {
		t.Errorf("B's token on the new primary = %d, want more than A's %d", bToken, la.Token())
	}
	// Two deadlines of heartbeats, all answered by the old primary.
	time.Sleep(2 * cfg.Deadline)
	if err := la.Signal().Err(); err != nil {
		t.Errorf("A's Err() = %v; the old primary still runs and answers, so nothing could tell A", err)
	}
	if guardedWrite(t, connect(t, standby, standby.Addr()), "orders", la.Token(), "A on the new primary") {
		t.Error("A's write with its old token passed the guard on the new primary")
	}
	if !guardedWrite(t, b, "orders", bToken, "B") {
		t.Error("B's write with its token was refused on the new primary")
	}
	if !guardedWrite(t, connect(t, primary, primary.Addr()), "orders", la.Token(), "A on the old primary") {
		t.Error("A's write on the old primary was refused; its own table still says A holds the latest token")
	}
}
