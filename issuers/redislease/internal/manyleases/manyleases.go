// Package manyleases holds many leases of one process on one Redis server
// at once and measures what holding them costs: the time to grant them
// all, the server's connections and commands a second while they are
// held, the goroutines and heap of the process, and the leases lost with
// no fault (false losses). It measures redislease and, beside it on the
// same server, redsync's Mutex extended every third of its expiry.
package manyleases

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/issuers/redislease"
)

// Config is one measurement.
type Config struct {
	Addr    string        // the server
	N       int           // the leases held at once
	Hold    time.Duration // how long they are held once all are granted
	TTL     time.Duration // the lease's TTL and redsync's expiry
	Workers int           // the goroutines that grant, release and (redsync) extend; 32 if 0
	Prefix  string        // the keys' prefix
	// Client, if set, makes the client the leases are taken through (a
	// Sentinel or Cluster client); Addr is then the server measured.
	Client func() redis.UniversalClient
}

// client returns the client the leases are taken through.
func (c Config) client() redis.UniversalClient {
	if c.Client != nil {
		return c.Client()
	}
	return redis.NewClient(&redis.Options{Addr: c.Addr})
}

// Result is what one client's N leases cost.
type Result struct {
	Client      string
	N           int
	Grant       time.Duration // from the first Lock to the last grant
	Conns       int64         // the server's connected clients while holding, less the measuring client
	CmdsPerSec  float64       // the server's commands a second while holding (INFO stats), less the measuring client's
	Goroutines  int           // the process's goroutines while holding, less those before the first Lock
	HeapPerKey  float64       // the process's live heap while holding, less before, per lease (bytes)
	FalseLosses int           // leases lost while holding, with no fault
	FirstLoss   string        // the cause of one of them
	// After the hold, an operator's DEL of one key (redislease only):
	// from the DEL's return to the loss of that lease, and the other
	// leases lost in the second after it.
	DelLoss   time.Duration
	DelOthers int
	Hold      time.Duration
}

// Row formats r as a row of the README's table.
func (r Result) Row() string {
	return fmt.Sprintf("| %s | %d | %s | %d | %.0f | %d (%.3f a lease) | %.0f B | %d |",
		r.Client, r.N, r.Grant.Round(time.Millisecond), r.Conns, r.CmdsPerSec, r.Goroutines,
		float64(r.Goroutines)/float64(r.N), r.HeapPerKey, r.FalseLosses)
}

// Header is the head of the table Row's rows go in.
const Header = "| client | leases | time to grant all | connections on the server | server commands/s while holding | goroutines | heap a lease | false losses |\n|---|--:|--:|--:|--:|--:|--:|--:|"

func (c Config) workers() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return 32
}

func (c Config) key(i int) string { return c.Prefix + strconv.Itoa(i) }

// each runs f(i) for i in [0, n) on c's workers, and returns the first error.
func (c Config) each(n int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(c.workers(), n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// Lease holds c.N leases of redislease, through one client with the
// Config of TTL c.TTL.
func Lease(ctx context.Context, c Config) (Result, error) {
	rdb := c.client()
	defer rdb.Close()
	ls := make([]*redislease.Lease, c.N)
	var r Result
	r.Client = "redislease"
	err := measure(ctx, c, &r, func() error {
		return c.each(c.N, func(i int) error {
			l, err := redislease.Config{TTL: c.TTL}.Lock(ctx, rdb, c.key(i))
			ls[i] = l
			return err
		})
	}, func() int {
		lost := 0
		for _, l := range ls {
			if err := l.Signal().Err(); err != nil {
				lost++
				r.FirstLoss = err.Error()
			}
		}
		return lost
	})
	if err == nil {
		r.DelLoss, r.DelOthers, err = delOne(ctx, c, ls)
	}
	c.each(c.N, func(i int) error {
		if ls[i] != nil {
			ls[i].Unlock(context.Background())
		}
		return nil
	})
	return r, err
}

// delOne deletes the key of ls[len(ls)/2] as an operator would, and
// returns how long after the DEL returned its lease was lost, and how many
// other leases were lost in the second after.
func delOne(ctx context.Context, c Config, ls []*redislease.Lease) (time.Duration, int, error) {
	before := 0
	for _, l := range ls {
		if l.Signal().Err() != nil {
			before++
		}
	}
	op := c.client() // on a Cluster, routed to the key's node
	defer op.Close()
	i := len(ls) / 2
	if err := op.Del(ctx, c.key(i)).Err(); err != nil {
		return 0, 0, err
	}
	deleted := time.Now()
	var took time.Duration
	select {
	case <-ls[i].Signal().Done():
		took = time.Since(deleted)
	case <-time.After(10 * time.Second):
		return 0, 0, fmt.Errorf("the lease of the deleted key %s was not lost within 10 s", c.key(i))
	}
	if !errors.Is(ls[i].Signal().Err(), redislease.ErrDeleted) {
		return took, 0, fmt.Errorf("the lease of the deleted key was lost with %v, want ErrDeleted", ls[i].Signal().Err())
	}
	time.Sleep(time.Second)
	after := 0
	for _, l := range ls {
		if l.Signal().Err() != nil {
			after++
		}
	}
	return took, after - before - 1, nil
}

// Redsync holds c.N of redsync's Mutex, each extended every third of its
// expiry c.TTL, as its README's long-running task does, by c's workers.
func Redsync(ctx context.Context, c Config) (Result, error) {
	rdb := redis.NewClient(&redis.Options{Addr: c.Addr})
	defer rdb.Close()
	rs := redsync.New(goredis.NewPool(rdb))
	ms := make([]*redsync.Mutex, c.N)
	var lost atomic.Int64
	failed := make([]atomic.Bool, c.N)
	hctx, stop := context.WithCancel(ctx)
	var extenders sync.WaitGroup
	var r Result
	r.Client = "redsync Mutex, extended every TTL/3"
	err := measure(ctx, c, &r, func() error {
		err := c.each(c.N, func(i int) error {
			// Made here, so that the heap a lease counts them, as it
			// counts the leases.
			ms[i] = rs.NewMutex(c.key(i), redsync.WithExpiry(c.TTL), redsync.WithTries(1))
			return ms[i].LockContext(ctx)
		})
		if err != nil {
			return err
		}
		// Each worker extends its share of the mutexes every third of
		// the expiry.
		w := c.workers()
		for k := range w {
			extenders.Go(func() {
				t := time.NewTicker(c.TTL / 3)
				defer t.Stop()
				for {
					select {
					case <-hctx.Done():
						return
					case <-t.C:
					}
					for i := k; i < c.N; i += w {
						if failed[i].Load() {
							continue
						}
						if ok, err := ms[i].ExtendContext(hctx); (!ok || err != nil) && hctx.Err() == nil {
							failed[i].Store(true)
							lost.Add(1)
						}
					}
				}
			})
		}
		return nil
	}, func() int { return int(lost.Load()) })
	stop()
	extenders.Wait()
	c.each(c.N, func(i int) error {
		if ms[i] != nil {
			ms[i].UnlockContext(context.Background())
		}
		return nil
	})
	return r, err
}

// measure grants the leases with grant, holds them c.Hold, and fills r;
// lost counts the leases lost by then.
func measure(ctx context.Context, c Config, r *Result, grant func() error, lost func() int) error {
	admin := redis.NewClient(&redis.Options{Addr: c.Addr, PoolSize: 1})
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return err
	}
	r.N, r.Hold = c.N, c.Hold
	g0 := runtime.NumGoroutine()
	h0 := heap()
	start := time.Now()
	if err := grant(); err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	r.Grant = time.Since(start)
	n0, err := stat(ctx, admin, "stats", "total_commands_processed")
	if err != nil {
		return err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.Hold):
	}
	n1, err := stat(ctx, admin, "stats", "total_commands_processed")
	if err != nil {
		return err
	}
	// The two INFO calls are the measuring client's.
	r.CmdsPerSec = float64(n1-n0-1) / time.Since(t0).Seconds()
	conns, err := stat(ctx, admin, "clients", "connected_clients")
	if err != nil {
		return err
	}
	r.Conns = conns - 1
	r.Goroutines = runtime.NumGoroutine() - g0
	r.HeapPerKey = float64(int64(heap())-int64(h0)) / float64(c.N)
	r.FalseLosses = lost()
	return nil
}

// heap returns the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// stat reads one field of a section of INFO.
func stat(ctx context.Context, rdb *redis.Client, section, field string) (int64, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("manyleases: no " + field + " in INFO " + section)
}
