package mysqllease_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/zukhruf/lease/issuers/mysqllease"
	"github.com/zukhruf/lease/issuers/mysqllease/internal/mysqltest"
)

// TestFenceGrowsAndRefusesStaleWrites takes the lock again and again on a
// primary with a replica, through each event that drops a lock: a KILL of
// the holder's session, a shutdown and restart, a crash (SIGKILL) and
// restart, and a failover to the replica, which had the token's row. Every
// grant's token must be larger than the one before, and a write guarded by
// an older token must change no row once a newer one has written.
func TestFenceGrowsAndRefusesStaleWrites(t *testing.T) {
	primary, err := mysqltest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	replica, err := primary.StartReplica()
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	admin := rootDB(t, primary)
	mustExec(t, admin, "CREATE DATABASE shop")
	mustExec(t, admin, "CREATE TABLE shop.lease_tokens (name VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB")
	mustExec(t, admin, "CREATE TABLE shop.orders (id INT PRIMARY KEY, batch INT NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB")
	mustExec(t, admin, "INSERT INTO shop.orders VALUES (1, 0, 0)")
	cfg := fast
	cfg.Fence = "shop.lease_tokens"
	const subj = "orders"

	var last int64
	var stale []int64 // tokens of holders that lost the lock
	step := func(l *mysqllease.Lease, event string) {
		t.Helper()
		if l.Token() <= last {
			t.Fatalf("after %s: token %d, not above the last %d", event, l.Token(), last)
		}
		last = l.Token()
	}
	write := func(s *mysqltest.Server, token int64) int64 {
		t.Helper()
		res, err := rootDB(t, s).Exec("UPDATE shop.orders SET batch = batch + 1, token = ? WHERE id = 1 AND token <= ?", token, token)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := res.RowsAffected()
		return n
	}

	db := rootDB(t, primary)
	a := lock(t, cfg, db, subj)
	step(a, "the first grant")
	if write(primary, a.Token()) != 1 {
		t.Fatal("the holder's own write was refused")
	}
	// A KILL of the holder's session drops the lock.
	mustExec(t, admin, fmt.Sprintf("KILL CONNECTION %d", sessionOf(t, admin, a)))
	waitLost(t, a)
	stale = append(stale, a.Token())
	b := lock(t, cfg, db, subj)
	step(b, "a KILL")
	if write(primary, b.Token()) != 1 {
		t.Fatal("the new holder's write was refused")
	}
	for _, tok := range stale {
		if n := write(primary, tok); n != 0 {
			t.Fatalf("a stale write with token %d changed %d rows after token %d wrote", tok, n, b.Token())
		}
	}
	b.Unlock(context.Background())
	// A shutdown, then a crash: the row survives both.
	for _, stop := range []struct {
		name string
		do   func() error
	}{{"a shutdown and restart", primary.Stop}, {"a crash (SIGKILL) and restart", primary.Kill}} {
		held := lock(t, cfg, rootDB(t, primary), subj)
		if err := stop.do(); err != nil {
			t.Fatal(err)
		}
		waitLost(t, held)
		step(held, "the grant before "+stop.name)
		if err := primary.Restart(); err != nil {
			t.Fatal(err)
		}
		next := lock(t, cfg, rootDB(t, primary), subj)
		step(next, stop.name)
		next.Unlock(context.Background())
	}
	// A failover: the replica caught up, the primary killed, the replica
	// promoted.
	if err := replica.CatchUp(primary); err != nil {
		t.Fatal(err)
	}
	held := lock(t, cfg, rootDB(t, primary), subj)
	step(held, "the grant before the failover")
	if err := replica.CatchUp(primary); err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	waitLost(t, held)
	if err := replica.Promote(); err != nil {
		t.Fatal(err)
	}
	after := lock(t, cfg, rootDB(t, replica), subj)
	defer after.Unlock(context.Background())
	step(after, "a failover")
	if write(replica, after.Token()) != 1 {
		t.Fatal("the new holder's write on the promoted replica was refused")
	}
	if n := write(replica, held.Token()); n != 0 {
		t.Fatalf("a stale write with token %d changed %d rows on the promoted replica", held.Token(), n)
	}
}
