package pglease_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

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
