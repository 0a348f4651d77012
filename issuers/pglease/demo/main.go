// Command demo shows two holders contending for one PostgreSQL advisory lock.
//
// It starts a real PostgreSQL server (the Debian package postgresql) on a
// loopback port, with its data in a temporary folder. Holder A takes the
// lock with a fencing token and writes batches to a table, each write
// guarded by its token; holder B waits for the lock. An operator terminates
// A's backend with pg_terminate_backend: A's signal is lost with the
// server's cause, B gets the lock with a larger token and goes on, and a
// late retry of A's, with its old token, is refused by the table's guard.
// The demo prints the timeline and removes everything it made.
//
// Run it with `make demo-pg`, or `go run ./demo` in this module.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

const (
	subject = "orders"
	// pause is how long a holder rests between batches; the loss ends the
	// rest early.
	pause = 100 * time.Millisecond
	// bound guards the demo's waits against a hang.
	bound = 30 * time.Second
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

// write stores batch if token is the lock's latest fencing token, in one
// statement: FOR SHARE makes a later grant's increment wait for this write.
func write(ctx context.Context, data *pgxpool.Pool, token int64, batch string) (bool, error) {
	tag, err := data.Exec(ctx, `insert into batches (batch, token)
		select $3, $2 where (select token from lease_tokens where key = $1 for share) = $2`,
		pglease.Key(subject), token, batch)
	return tag.RowsAffected() == 1, err
}

// holderPID returns the backend that holds the advisory lock of key, as
// an operator finds it in pg_locks.
func holderPID(ctx context.Context, op *pgx.Conn, key int64) (int32, error) {
	u := uint64(key)
	var pid int32
	err := op.QueryRow(ctx, "select pid from pg_locks where locktype = 'advisory' and granted "+
		"and classid = $1 and objid = $2 and objsubid = 1", uint32(u>>32), uint32(u)).Scan(&pid)
	return pid, err
}

func run(out io.Writer) error {
	fmt.Fprintf(out, "two holders contend for the PostgreSQL advisory lock of %q; times since the demo began\n\n", subject)
	tl := &timeline{out: out, start: time.Now()}
	srv, err := pgtest.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	tl.say("postgres", "serving on %s, data in a temporary folder", srv.Addr())

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	// Each holder has its own pool, as it would in its own process: its lease
	// takes a connection of its own out of it, and its writes use the rest.
	var pools []*pgxpool.Pool
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	newPool := func() (*pgxpool.Pool, error) {
		p, err := pgxpool.New(ctx, srv.ConnString(srv.Addr()))
		if err == nil {
			pools = append(pools, p)
		}
		return p, err
	}
	op, err := srv.Connect(ctx, srv.Addr())
	if err != nil {
		return err
	}
	defer op.Close(context.Background())
	if _, err := op.Exec(ctx, `create table lease_tokens (key bigint primary key, token bigint not null);
		create table batches (batch text, token bigint)`); err != nil {
		return err
	}
	cfg := pglease.Config{Fence: pgx.Identifier{"lease_tokens"}}
	aPool, err := newPool()
	if err != nil {
		return err
	}
	bPool, err := newPool()
	if err != nil {
		return err
	}

	a, err := cfg.Lock(ctx, aPool, subject)
	if err != nil {
		return err
	}
	defer a.Unlock(ctx)
	aPID, err := holderPID(ctx, op, a.Key())
	if err != nil {
		return err
	}
	tl.say("holder A", "locked %q: advisory key %d, backend %d, fencing token %d", subject, a.Key(), aPID, a.Token())

	type locked struct {
		l   *pglease.Lease
		err error
	}
	bc := make(chan locked, 1)
	tl.say("holder B", "asks for %q and waits", subject)
	go func() {
		l, err := cfg.Lock(ctx, bPool, subject)
		bc <- locked{l, err}
	}()

	// Holder A works until its lease is lost; after its third batch, the
	// operator terminates its backend.
	sig := a.Signal()
	var last string
	for i := 1; ; i++ {
		if err := sig.Err(); err != nil {
			tl.say("holder A", "told before batch %d: %v", i, err)
			tl.say("holder A", "errors.Is(err, pglease.ErrTerminated) = %v; it stops", errors.Is(err, pglease.ErrTerminated))
			break
		}
		last = fmt.Sprintf("A-%d", i)
		ok, err := write(ctx, aPool, a.Token(), last)
		if err != nil {
			return err
		}
		tl.say("holder A", "batch %d stored with fencing token %d: %v", i, a.Token(), ok)
		if i == 3 {
			if _, err := op.Exec(ctx, "select pg_terminate_backend($1)", int32(aPID)); err != nil {
				return err
			}
			tl.say("operator", "pg_terminate_backend(%d): the server frees A's lock with its session", aPID)
		}
		select {
		case <-sig.Done():
		case <-time.After(pause):
		}
	}

	var b locked
	select {
	case b = <-bc:
	case <-ctx.Done():
		return errors.New("holder B was not granted the lock")
	}
	if b.err != nil {
		return b.err
	}
	bPID, err := holderPID(ctx, op, b.l.Key())
	if err != nil {
		return err
	}
	tl.say("holder B", "locked %q: backend %d, fencing token %d", subject, bPID, b.l.Token())
	ok, err := write(ctx, bPool, b.l.Token(), "B-1")
	if err != nil {
		return err
	}
	tl.say("holder B", "batch 1 stored with fencing token %d: %v", b.l.Token(), ok)
	ok, err = write(ctx, aPool, a.Token(), last+" (retry)")
	if err != nil {
		return err
	}
	if ok {
		return errors.New("a late write of A's passed the fencing guard")
	}
	tl.say("table", "refused a late retry of A's batch %q: fencing token %d is not the latest, %d", last, a.Token(), b.l.Token())
	if err := b.l.Unlock(ctx); err != nil {
		return err
	}
	tl.say("holder B", "unlocked; its signal after the release: Err() = %v", b.l.Signal().Err())
	fmt.Fprintf(out, "\nA's error, as a holder sees it:\n  %v\n", sig.Err())
	return nil
}
