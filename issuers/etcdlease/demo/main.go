// Command demo shows two holders contending for one etcd lock.
//
// It starts a real etcd server in this process, on a loopback port the
// kernel picks, with its data in a temporary folder. Holder A takes the lock
// and writes batches to a warehouse that checks fencing revisions; holder B
// waits for the lock. An operator revokes A's session: A's signal is lost
// with etcd's cause, B gets the lock with a larger fencing revision and goes
// on, and a write of A's that was still on its way is refused by the
// warehouse because its revision is older than B's. The demo prints the
// timeline and removes everything it made.
//
// Run it with `make demo-etcd`, or `go run ./demo` in this module.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
	"github.com/zukhruf/lease/lost"
)

const (
	lockName = "/locks/orders"
	// pause is how long a holder rests between batches; the loss ends the
	// rest early.
	pause = 100 * time.Millisecond
	// bound guards the demo's waits against a hang.
	bound = 10 * time.Second
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// timeline prints events with the time since the demo began.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (tl *timeline) say(who, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	ms := time.Since(tl.start).Milliseconds()
	fmt.Fprintf(tl.out, "%6d ms  %-9s %s\n", ms, who, fmt.Sprintf(format, args...))
}

// warehouse stores batches and refuses any write whose fencing revision is
// older than the newest it has accepted: the check ADR 0001 asks of a
// resource, since a signal can warn a holder but not recall a write already
// sent.
type warehouse struct {
	mu      sync.Mutex
	highest int64
	stored  []string
}

func (w *warehouse) write(rev int64, batch string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev < w.highest {
		return fmt.Errorf("fencing revision %d is older than %d", rev, w.highest)
	}
	w.highest = rev
	w.stored = append(w.stored, batch)
	return nil
}

func run(out io.Writer) error {
	fmt.Fprintf(out, "two holders contend for the etcd lock %s; times since the demo began\n\n", lockName)
	tl := &timeline{out: out, start: time.Now()}
	dir, err := os.MkdirTemp("", "etcdlease-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := etcdtest.Start(dir)
	if err != nil {
		return err
	}
	defer srv.Close()
	tl.say("etcd", "serving on %s, data in a temporary folder", srv.Endpoint())

	// Each party has its own client, as it would in its own process; they
	// close before the server stops. A session's TTL of 60 s puts its next
	// renewal well after the demo's revocation, which A therefore hears as
	// the deletion of its key, not as a renewal's answer.
	var clients []*clientv3.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	session := func() (*concurrency.Session, error) {
		cli, err := srv.Client()
		if err != nil {
			return nil, err
		}
		clients = append(clients, cli)
		return concurrency.NewSession(cli, concurrency.WithTTL(60))
	}
	sa, err := session()
	if err != nil {
		return err
	}
	sb, err := session()
	if err != nil {
		return err
	}
	op, err := srv.Client()
	if err != nil {
		return err
	}
	clients = append(clients, op)

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	wh := &warehouse{}

	a, err := etcdlease.Lock(ctx, sa, lockName)
	if err != nil {
		return err
	}
	defer a.Unlock(ctx)
	tl.say("holder A", "locked %s: key %s, fencing revision %d", lockName, a.Key(), a.Token())

	type locked struct {
		l   *etcdlease.Lease
		err error
	}
	bc := make(chan locked, 1)
	tl.say("holder B", "asks for %s and waits", lockName)
	go func() {
		l, err := etcdlease.Lock(ctx, sb, lockName)
		bc <- locked{l, err}
	}()

	// Holder A works until its lease is lost; after its third batch, the
	// operator revokes its session.
	sig := a.Signal()
	revoked := false
	var late string // the write of A's that arrives after B's
	for n := 1; ; n++ {
		if err := sig.Err(); err != nil {
			tl.say("holder A", "told before batch %d: %v", n, err)
			var le *lost.Error
			if !errors.As(err, &le) {
				return fmt.Errorf("holder A: the loss %v is not a *lost.Error", err)
			}
			tl.say("holder A", "stops: subject %s, errors.Is(err, etcdlease.ErrKeyDeleted) = %v",
				le.Subject(), errors.Is(err, etcdlease.ErrKeyDeleted))
			late = fmt.Sprintf("batch %d", n-1) // a retry A's client sent before the loss
			break
		}
		batch := fmt.Sprintf("batch %d", n)
		if err := wh.write(a.Token(), batch); err != nil {
			return fmt.Errorf("holder A: %w", err)
		}
		tl.say("holder A", "%s stored with fencing revision %d", batch, a.Token())
		if n == 3 && !revoked {
			revoked = true
			if _, err := op.Revoke(ctx, sa.Lease()); err != nil {
				return err
			}
			tl.say("operator", "revoked A's session lease %x", sa.Lease())
		}
		select {
		case <-sig.Done():
		case <-time.After(pause):
		case <-ctx.Done():
			return errors.New("holder A was never told of the revocation")
		}
	}

	var b *etcdlease.Lease
	select {
	case r := <-bc:
		if r.err != nil {
			return r.err
		}
		b = r.l
	case <-ctx.Done():
		return errors.New("holder B never got the lock")
	}
	tl.say("holder B", "locked %s: key %s, fencing revision %d", lockName, b.Key(), b.Token())
	for n := 4; n <= 6; n++ {
		if err := b.Signal().Err(); err != nil {
			return fmt.Errorf("holder B: %w", err)
		}
		batch := fmt.Sprintf("batch %d", n)
		if err := wh.write(b.Token(), batch); err != nil {
			return fmt.Errorf("holder B: %w", err)
		}
		tl.say("holder B", "%s stored with fencing revision %d", batch, b.Token())
		if n == 4 {
			// A retry of A's, sent before A was told, arrives only now.
			if err := wh.write(a.Token(), late); err != nil {
				tl.say("warehouse", "refused a late retry of A's %s: %v", late, err)
			} else {
				return errors.New("the warehouse took a write from a holder that lost its lease")
			}
		}
	}
	if err := b.Unlock(ctx); err != nil {
		return err
	}
	tl.say("holder B", "unlocked; its signal after the release: Err() = %v", b.Signal().Err())

	fmt.Fprintf(out, "\nfencing revisions: A %d, B %d; the warehouse holds %v\n", a.Token(), b.Token(), wh.stored)
	return nil
}
