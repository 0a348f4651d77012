// Command demo shows two holders contending for one Redis key, then a
// Sentinel failover under a holder.
//
// It starts real Redis servers (the Debian packages redis-server and
// redis-sentinel) on loopback ports, with their files in a temporary folder.
// Holder A takes the key "orders" with a fencing token; holder B waits for
// it. An operator deletes the key: A's signal is lost at once with the
// cause, B takes the key with a larger token. Then, on a primary with two
// replicas and three Sentinels, holder C takes the key, the primary is
// paused, C is lost at its deadline, before the key can expire on the
// replica Sentinel promotes, and D takes the key on the new primary with a
// larger token. The demo prints the timeline and removes everything it made.
//
// Run it with `make demo-redis`, or `go run ./demo` in this module.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

const (
	key = "orders"
	// bound guards the demo's waits against a hang.
	bound = 60 * time.Second
)

var cfg = redislease.Config{TTL: 2 * time.Second}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
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

type granted struct {
	l   *redislease.Lease
	err error
}

func lockAsync(ctx context.Context, rdb redis.UniversalClient) <-chan granted {
	c := make(chan granted, 1)
	go func() {
		l, err := cfg.Lock(ctx, rdb, key)
		c <- granted{l, err}
	}()
	return c
}

func run(out io.Writer) error {
	dir, err := os.MkdirTemp("", "redislease-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	tl := &timeline{out: out, start: time.Now()}
	if err := takeover(ctx, tl, dir); err != nil {
		return err
	}
	return failover(ctx, tl, dir)
}

// takeover: an operator deletes A's key; A is told, B takes over.
func takeover(ctx context.Context, tl *timeline, dir string) error {
	srv, err := redistest.NewServer(dir)
	if err != nil {
		return err
	}
	defer srv.Kill()
	tl.say("redis", "redis-server on %s", srv.Addr())
	rdbA := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdbA.Close()
	rdbB := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdbB.Close()
	op := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer op.Close()

	a, err := cfg.Lock(ctx, rdbA, key)
	if err != nil {
		return err
	}
	defer a.Unlock(context.Background())
	tl.say("holder A", "locked %q with fencing token %d", key, a.Token())
	bc := lockAsync(ctx, rdbB)
	time.Sleep(300 * time.Millisecond)
	tl.say("holder B", "waiting for %q", key)
	if err := op.Del(ctx, key).Err(); err != nil {
		return err
	}
	deleted := time.Now()
	tl.say("operator", "DEL %s", key)
	select {
	case <-a.Signal().Done():
	case <-ctx.Done():
		return errors.New("holder A was not told")
	}
	tl.say("holder A", "told %v after the DEL returned: %v", time.Since(deleted).Round(10*time.Microsecond), a.Signal().Err())
	tl.say("holder A", "errors.Is(err, redislease.ErrDeleted) = %t", errors.Is(a.Signal().Err(), redislease.ErrDeleted))
	// The key's claim outlives the DEL: B is not granted until A, lost,
	// gives it back, or it runs out a TTL after A's last renewal.
	if err := a.Unlock(ctx); err != nil {
		return err
	}
	tl.say("holder A", "unlocked: the key's claim, which kept B waiting after the DEL, is given back")
	g := <-bc
	if g.err != nil {
		return g.err
	}
	tl.say("holder B", "locked %q with fencing token %d, larger than A's %d", key, g.l.Token(), a.Token())
	if err := g.l.Unlock(ctx); err != nil {
		return err
	}
	tl.say("holder B", "unlocked; its signal after the release: Err() = %v", g.l.Signal().Err())
	return nil
}

// failover: the primary under C pauses; Sentinel promotes a replica; C is
// lost at its deadline, D takes the key on the new primary.
func failover(ctx context.Context, tl *timeline, dir string) error {
	g, err := redistest.NewGroup(dir, 2)
	if err != nil {
		return err
	}
	defer g.Close()
	tl.say("redis", "primary %s, replicas %s and %s, Sentinels watching it", g.Primary.Addr(), g.Replicas[0].Addr(), g.Replicas[1].Addr())
	rdbC := redis.NewFailoverClient(g.FailoverOptions())
	defer rdbC.Close()
	rdbD := redis.NewFailoverClient(g.FailoverOptions())
	defer rdbD.Close()
	c, err := cfg.Lock(ctx, rdbC, key)
	if err != nil {
		return err
	}
	defer c.Unlock(context.Background())
	has := 0
	for _, r := range g.Replicas {
		rc := redis.NewClient(&redis.Options{Addr: r.Addr()})
		if n, err := rc.Exists(ctx, key).Result(); err == nil && n == 1 {
			has++
		}
		rc.Close()
	}
	tl.say("holder C", "locked %q with fencing token %d; the key is on %d of the 2 replicas as Lock returns (WAIT)", key, c.Token(), has)
	dc := lockAsync(ctx, rdbD)
	time.Sleep(300 * time.Millisecond)
	tl.say("holder D", "waiting for %q", key)
	old := g.Primary.Addr()
	if err := g.Primary.Pause(); err != nil {
		return err
	}
	defer g.Primary.Resume()
	tl.say("operator", "SIGSTOP to the primary %s", old)
	failed := make(chan string, 1)
	go func() {
		addr, _ := g.WaitFailover(ctx, old)
		failed <- addr
	}()
	select {
	case <-c.Signal().Done():
	case <-ctx.Done():
		return errors.New("holder C was not told")
	}
	tl.say("holder C", "lost: %v", c.Signal().Err())
	tl.say("redis", "Sentinel promoted %s", <-failed)
	gd := <-dc
	if gd.err != nil {
		return gd.err
	}
	tl.say("holder D", "locked %q on the new primary with fencing token %d, larger than C's %d", key, gd.l.Token(), c.Token())
	return gd.l.Unlock(ctx)
}
