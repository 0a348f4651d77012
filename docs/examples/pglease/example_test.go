package pglease_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/zukhruf/lease/docs/examples/pglease"
)

// The holder works while its signal is live and stops at the loss; here an
// operator terminates the session's backend.
func ExampleLock() {
	ctx := context.Background()
	conn, err := server.Connect(ctx, server.Addr()) // a *pgx.Conn
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	l, err := pglease.Lock(ctx, conn, "orders")
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)
	sig := l.Signal()
	fmt.Println("holding: Err() =", sig.Err())

	terminateBackend(conn.PgConn().PID()) // pg_terminate_backend, from another session

	<-sig.Done()
	fmt.Println(sig.Err())
	fmt.Println("terminated:", errors.Is(sig.Err(), pglease.ErrTerminated))
	// Output:
	// holding: Err() = <nil>
	// lease lost: orders: pglease: backend terminated: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)
	// terminated: true
}

// Unlock ends the lease before it releases the lock: the signal is never
// lost, and the connection is the holder's again.
func ExampleLease_Unlock() {
	ctx := context.Background()
	conn, err := server.Connect(ctx, server.Addr())
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	l, err := pglease.Lock(ctx, conn, "orders")
	if err != nil {
		panic(err)
	}
	fmt.Println("Unlock:", l.Unlock(ctx))
	fmt.Println("Err() after the release:", l.Signal().Err())
	var held bool
	if err := conn.QueryRow(ctx, "select exists (select from pg_locks where locktype = 'advisory' and pid = pg_backend_pid())").Scan(&held); err != nil {
		panic(err)
	}
	fmt.Println("the session holds an advisory lock:", held)
	// Output:
	// Unlock: <nil>
	// Err() after the release: <nil>
	// the session holds an advisory lock: false
}

// terminateBackend ends backend pid from a session of its own.
func terminateBackend(pid uint32) {
	ctx := context.Background()
	admin, err := server.Connect(ctx, server.Addr())
	if err != nil {
		panic(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "select pg_terminate_backend($1)", int32(pid)); err != nil {
		panic(err)
	}
}
