package pglease_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/pglease"
)

// The holder works while its signal is live and stops at the loss; here an
// operator terminates the session's backend.
func ExampleLock() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, server.ConnString(server.Addr()))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	l, err := pglease.Lock(ctx, pool, "orders") // the lease takes a connection of its own
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)
	sig := l.Signal()
	fmt.Println("holding: Err() =", sig.Err())

	terminateHolder(pool, l.Key()) // pg_terminate_backend of the lock's holder, from another session

	<-sig.Done()
	fmt.Println(sig.Err())
	fmt.Println("terminated:", errors.Is(sig.Err(), pglease.ErrTerminated))
	// Output:
	// holding: Err() = <nil>
	// lease lost: orders: pglease: backend terminated: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)
	// terminated: true
}

// Unlock ends the lease before it releases the lock, then closes the
// lease's session: the signal is never lost. Its error must be checked: nil
// means that pg_advisory_unlock released the lock.
func ExampleLease_Unlock() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, server.ConnString(server.Addr()))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	l, err := pglease.Lock(ctx, pool, "orders")
	if err != nil {
		panic(err)
	}
	fmt.Println("Unlock:", l.Unlock(ctx))
	fmt.Println("Err() after the release:", l.Signal().Err())
	var held bool
	if err := pool.QueryRow(ctx, "select exists (select from pg_locks where locktype = 'advisory')").Scan(&held); err != nil {
		panic(err)
	}
	fmt.Println("the server holds an advisory lock:", held)
	// Output:
	// Unlock: <nil>
	// Err() after the release: <nil>
	// the server holds an advisory lock: false
}

// A Locker takes leases through the portable API of package lease, the same
// for every issuer; TryLock refuses a subject held now instead of waiting for
// it.
func ExampleNewLocker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, server.ConnString(server.Addr()))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	// The fencing table, once per database: each grant's token is larger.
	if _, err := pool.Exec(ctx, "create table if not exists locker_tokens (key bigint primary key, token bigint not null)"); err != nil {
		panic(err)
	}
	var locker lease.TryLocker = pglease.NewLocker(pool, pglease.Config{Fence: pgx.Identifier{"locker_tokens"}})
	a, err := locker.Lock(ctx, "invoices")
	if err != nil {
		panic(err)
	}
	_, err = locker.TryLock(ctx, "invoices")
	fmt.Println(err)
	fmt.Println("held:", errors.Is(err, lease.ErrHeld))
	fmt.Println("Unlock:", a.Unlock(ctx))
	b, err := locker.TryLock(ctx, "invoices")
	if err != nil {
		panic(err)
	}
	defer b.Unlock(ctx)
	fmt.Println("the next holder's token is larger:", b.Token() > a.Token())
	// Output:
	// pglease: trylock "invoices": lease: subject is held: another lease of this process holds the lock
	// held: true
	// Unlock: <nil>
	// the next holder's token is larger: true
}

// A Config that keys the subject with a secret, for subjects taken from
// users: without the secret, nobody can pick two subjects that share a
// lock.
func ExampleConfig_Key() {
	cfg := pglease.Config{Secret: []byte("from the deployment's secret store")}
	a, b := "subj-66f0332ec10e249a", "subj-cbf1f9e95cb1a442"
	fmt.Println("unkeyed, one lock:", pglease.Key(a) == pglease.Key(b))
	fmt.Println("keyed, one lock:", cfg.Key(a) == cfg.Key(b))
	// Output:
	// unkeyed, one lock: true
	// keyed, one lock: false
}

// terminateHolder ends the backend that holds the lock of key, from a
// session of the pool.
func terminateHolder(pool *pgxpool.Pool, key int64) {
	u := uint64(key)
	_, err := pool.Exec(context.Background(), "select pg_terminate_backend(pid) from pg_locks "+
		"where locktype = 'advisory' and granted and classid = $1 and objid = $2 and objsubid = 1",
		uint32(u>>32), uint32(u))
	if err != nil {
		panic(err)
	}
}
