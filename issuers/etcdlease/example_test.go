package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
	"github.com/zukhruf/lease/lost"
)

// exampleSession starts an etcd server in a temporary folder and returns a
// client of it, a session of that client with a TTL of 60 s, and the func
// that stops the client and the server. No renewal of so long a TTL comes
// within an example, so a revocation reaches the holder as the deletion of
// its key, and never first as a renewal's answer that etcd has no lease.
func exampleSession() (*clientv3.Client, *concurrency.Session, func()) {
	dir, err := os.MkdirTemp("", "etcdlease-example")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := etcdtest.Start(dir)
	if err != nil {
		log.Fatal(err)
	}
	cli, err := srv.Client()
	if err != nil {
		log.Fatal(err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
	if err != nil {
		log.Fatal(err)
	}
	return cli, s, func() {
		cli.Close()
		srv.Close()
		os.RemoveAll(dir)
	}
}

// A holder locks a key and works while its signal is live; an operator
// revokes the session's etcd lease, and the signal says so.
func ExampleLock() {
	cli, s, stop := exampleSession()
	defer stop()
	ctx := context.Background()

	l, err := etcdlease.Lock(ctx, s, "/locks/orders")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	sig := l.Signal()
	fmt.Println("holding:", sig.Err() == nil, "token > 0:", l.Token() > 0)

	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		log.Fatal(err)
	}
	<-sig.Done()
	var le *lost.Error
	if errors.As(sig.Err(), &le) {
		fmt.Println("lost:", le.Subject())
	}
	// etcd deleted the key with the revoked lease: that is what the holder
	// hears first, and it does not wait to ask etcd why.
	fmt.Println("key deleted:", errors.Is(sig.Err(), etcdlease.ErrKeyDeleted))
	// Output:
	// holding: true token > 0: true
	// lost: /locks/orders
	// key deleted: true
}

// A Locker takes locks through the API every issuer implements; a TryLock
// of a held lock, from another session, is refused at once.
func ExampleNewLocker() {
	cli, s, stop := exampleSession()
	defer stop()
	ctx := context.Background()

	l, err := etcdlease.NewLocker(s).Lock(ctx, "/locks/orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding:", l.Signal().Err() == nil, "token > 0:", l.Token() > 0)

	other, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	second := etcdlease.NewLocker(other)
	_, err = second.TryLock(ctx, "/locks/orders")
	fmt.Println("held:", errors.Is(err, lease.ErrHeld))

	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	next, err := second.TryLock(ctx, "/locks/orders")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Unlock(ctx)
	fmt.Println("after Unlock: a larger token:", next.Token() > l.Token())
	// Output:
	// holding: true token > 0: true
	// held: true
	// after Unlock: a larger token: true
}

// A leader's key is deleted by hand: the coordinator refused the claim.
func ExampleCampaign() {
	cli, s, stop := exampleSession()
	defer stop()
	ctx := context.Background()

	l, err := etcdlease.Campaign(ctx, s, "/elections/orders", "node-a")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Resign(ctx)
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		log.Fatal(err)
	}
	<-l.Signal().Done()
	fmt.Println("key deleted:", errors.Is(l.Signal().Err(), etcdlease.ErrKeyDeleted))
	// Output:
	// key deleted: true
}

// Unlock ends the lease before it deletes the key, so the deletion it makes,
// and the end of the session after it, lose nothing.
func ExampleLease_Unlock() {
	_, s, stop := exampleSession()
	defer stop()
	ctx := context.Background()

	l, err := etcdlease.Lock(ctx, s, "/locks/orders")
	if err != nil {
		log.Fatal(err)
	}
	sig := l.Signal()
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := s.Close(); err != nil { // revokes the session's etcd lease
		log.Fatal(err)
	}
	fmt.Println("after Unlock and the session's end:", sig.Err())
	// Output:
	// after Unlock and the session's end: <nil>
}
