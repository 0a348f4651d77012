package mysqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/mysqllease"
)

// A holder takes the lock of a subject, checks its signal before each
// write, fences each write with its token, and releases the lock.
func ExampleConfig_Lock() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	cfg := mysqllease.Config{ServerTimeout: 10 * time.Second, Margin: 5 * time.Second, Fence: "shop.lease_tokens"}
	l, err := cfg.Lock(ctx, db, "orders")
	if err != nil {
		log.Fatal(err) // errors.Is(err, mysqllease.ErrReplica), ErrPooled, ...
	}
	defer func() {
		if err := l.Unlock(ctx); err != nil {
			log.Print(err) // the lease was lost before, or the session was ended instead
		}
	}()
	sig := l.Signal()
	for batch := range 10 {
		if err := sig.Err(); err != nil {
			if errors.Is(err, mysqllease.ErrUnresponsive) {
				log.Print("the server stopped answering")
			}
			return
		}
		wctx, cancel := sig.Context(ctx) // the loss cuts the write in flight
		_, err := db.ExecContext(wctx, "UPDATE shop.orders SET batch = ?, token = ? WHERE id = 1 AND token <= ?",
			batch, l.Token(), l.Token())
		cancel()
		if err != nil {
			return
		}
	}
}

// A Locker takes leases through one *sql.DB with one Config, behind the
// portable lease.TryLocker: code written against it runs on any issuer.
func ExampleNewLocker() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	var locker lease.TryLocker = mysqllease.NewLocker(db, mysqllease.Config{Fence: "shop.lease_tokens"})
	l, err := locker.TryLock(ctx, "orders")
	if errors.Is(err, lease.ErrHeld) {
		return // another holder has it now; Lock would wait for it
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	sig := l.Signal()
	if err := sig.Err(); err != nil {
		return // lost: do not write
	}
	wctx, cancel := sig.Context(ctx) // the loss cuts the write in flight
	defer cancel()
	_, err = db.ExecContext(wctx, "UPDATE shop.orders SET batch = ?, token = ? WHERE id = 1 AND token <= ?",
		1, l.Token(), l.Token())
	if err != nil {
		log.Print(err)
	}
}

// LockName says which server lock a subject names: itself when it is
// short, a hash when it is over 64 characters or a Secret is set.
func ExampleConfig_LockName() {
	short, _ := mysqllease.LockName("orders")
	fmt.Println(short)
	keyed, _ := mysqllease.Config{Secret: []byte("k")}.LockName("orders")
	fmt.Println(len(keyed), keyed[:11])
	_, err := mysqllease.LockName("")
	fmt.Println(err)
	// Output:
	// orders
	// 63 mysqllease:
	// an empty subject, which GET_LOCK refuses
}
