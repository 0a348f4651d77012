// Command demo shows two holders of one S3 lock object on a versitygw
// server it starts in a temporary folder: an operator deletes the object
// under the first, which is told at its next renewal with the cause; the
// second, waiting all along, takes over with a larger fencing token. It
// prints the timeline; make demo-s3 runs it.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease/issuers/s3lease"
	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"
)

func main() {
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "s3lease-demo")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := s3test.NewServer(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Kill()
	if err := srv.Bucket("locks"); err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%6.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx := context.Background()
	cfg := s3lease.Config{Bucket: "locks", TTL: 2 * time.Second}
	a, err := cfg.Lock(ctx, s3test.Client(srv.Addr()), "orders")
	if err != nil {
		log.Fatal(err)
	}
	say("A holds locks/orders, token %d, renewed every %v", a.Token(), cfg.TTL/4)
	granted := make(chan *s3lease.Lease, 1)
	go func() {
		b, err := cfg.Lock(ctx, s3test.Client(srv.Addr()), "orders")
		if err != nil {
			log.Fatal(err)
		}
		granted <- b
	}()
	say("B waits in Lock, polling the object")
	time.Sleep(time.Second)
	if err := s3test.Client(srv.Addr()).RemoveObject(ctx, "locks", "orders", minio.RemoveObjectOptions{}); err != nil {
		log.Fatal(err)
	}
	say("an operator deletes the lock object")
	<-a.Signal().Done()
	say("A is told: %v", a.Signal().Err())
	b := <-granted
	say("B holds locks/orders, token %d (A's was %d): B waited for the expiry it had read, after A's loss", b.Token(), a.Token())
	a.Unlock(ctx)
	if err := b.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	say("B releases it; the object stays, marked released, with its epoch for the next holder")
}
