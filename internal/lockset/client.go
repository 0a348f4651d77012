package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	ossignal "os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/internal/lockset/check"
	"github.com/zukhruf/lease/internal/lockset/history"
)

// A locker takes the locks of one client process, by the issuer of this
// repository or by the peer library, through one client of the server:
// the leases of a process with many locks share that client's sessions.
type locker interface {
	// acquire waits for lock until ctx ends. An error that leaves the
	// outcome unknown (the wait was cut while the server may have granted
	// it) wraps errUnknown. The process's loops call it at once, one per
	// lock.
	acquire(ctx context.Context, lock string) (holding, error)
	close()
}

// errUnknown marks an acquire whose outcome is not known: its event is of
// type info.
var errUnknown = errors.New("the outcome is not known")

// A holding is the lock, held.
type holding interface {
	token() int64
	// lost is closed when the library says the lock is lost; a release
	// does not close it.
	lost() <-chan struct{}
	// held is the check before each write, as a user of the library
	// writes it: sig.Err() == nil for the issuer.
	held() bool
	release(ctx context.Context) error
}

// clientConfig is what run tells each client process.
type clientConfig struct {
	issuer, side, p, lock string // lock: the process's locks, separated by commas
	endpoint, register    string
	store                 string // the real store's kind=addr (a run's -register), or ""
	servers               string // the servers' own addresses, each reached through the proxy at its index in endpoint
	ttl                   time.Duration
	seed                  uint64
}

// clientMain is a client process: for each of its locks, at once and
// through one locker, it loops acquire, then while it holds the lock, read
// the register, sleep up to the TTL, write it back with the token; then
// release at random, or lose. It writes its events to stdout, one JSON
// line each, and stops when it receives SIGTERM, releasing what it holds.
func clientMain(args []string) error {
	var c clientConfig
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	fs.StringVar(&c.issuer, "issuer", "", "")
	fs.StringVar(&c.side, "side", "lease", "lease or peer")
	fs.StringVar(&c.p, "p", "", "process name")
	fs.StringVar(&c.lock, "lock", "", "the locks' names, separated by commas")
	fs.StringVar(&c.endpoint, "endpoint", "", "the server's addresses, through the process's fault proxies")
	fs.StringVar(&c.servers, "servers", "", "the server's own addresses, in the order of -endpoint")
	fs.StringVar(&c.register, "register", "", "the register's URL")
	fs.StringVar(&c.store, "store", "", "the real store the register is also written to, kind=addr, or none")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "the lease's TTL")
	fs.Uint64Var(&c.seed, "seed", 1, "")
	fs.Parse(args)

	ctx, stop := ossignal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	l, err := newLocker(c)
	if err != nil {
		return err
	}
	defer l.close()
	out := history.NewWriter(os.Stdout)
	defer out.Flush()
	hc := &http.Client{Timeout: 5 * time.Second}
	locks := strings.Split(c.lock, ",")
	if len(locks) > 1 {
		// The default keeps 2 idle connections a host: the loops of
		// hundreds of locks would dial the register at each request.
		hc.Transport = &http.Transport{MaxIdleConnsPerHost: len(locks)}
	}
	var store storeWriter
	if c.store != "" {
		if store, err = openStore(c.store, c.ttl, hc); err != nil {
			return err
		}
		defer store.close()
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, lock := range locks {
		cfg := c
		cfg.lock = lock
		// The first lock's loop draws what a process of one lock drew.
		cl := &client{cfg: cfg, out: out, rng: rand.New(rand.NewPCG(c.seed, 0x10c5e7+uint64(i))), http: hc, mu: &mu, store: store}
		wg.Go(func() { cl.loop(ctx, l) })
	}
	wg.Wait()
	return nil
}

type client struct {
	cfg  clientConfig
	out  *history.Writer
	rng  *rand.Rand
	http *http.Client
	mu   *sync.Mutex // serializes the events of the process's loops and loss watchers
	// store is the run's real store (-register), or nil: each write goes
	// to it too, through its fence, right after the harness's register.
	store storeWriter
}

func (c *client) emit(f, typ string, token int64, value any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out.Write(history.Event{T: history.Now(), P: c.cfg.p, Lock: c.cfg.lock, F: f, Type: typ, Token: token, Value: value})
	c.out.Flush()
}

func (c *client) loop(ctx context.Context, l locker) {
	for ctx.Err() == nil {
		c.emit(history.Acquire, history.Invoke, 0, nil)
		actx, cancel := context.WithTimeout(ctx, 4*c.cfg.ttl)
		h, err := l.acquire(actx, c.cfg.lock)
		cancel()
		if err != nil {
			typ := history.Fail
			if errors.Is(err, errUnknown) {
				typ = history.Info
			}
			c.emit(history.Acquire, typ, 0, err.Error())
			c.sleep(ctx, time.Duration(c.rng.Int64N(int64(c.cfg.ttl/4))))
			continue
		}
		token := h.token()
		c.emit(history.Acquire, history.OK, token, nil)
		released := make(chan struct{})
		watched := make(chan struct{})
		go func() { // stamps the loss when the library reports it
			defer close(watched)
			select {
			case <-h.lost():
				c.emit(history.Lost, history.OK, token, nil)
			case <-released:
			}
		}()
		c.advance(ctx, token)     // after the watcher starts: a loss meanwhile is stamped when it comes
		keep := 1 + c.rng.IntN(8) // writes before a release, if the lock lasts
		for n := 0; h.held() && ctx.Err() == nil; n++ {
			if n == keep {
				break
			}
			v, ok := c.read(ctx)
			if !ok {
				continue
			}
			c.sleep(ctx, time.Duration(c.rng.Int64N(int64(c.cfg.ttl))))
			if !h.held() {
				break
			}
			c.write(ctx, token, v+1)
		}
		c.emit(history.Release, history.Invoke, token, nil)
		close(released)
		rctx, cancel := context.WithTimeout(context.Background(), c.cfg.ttl)
		err = h.release(rctx)
		cancel()
		<-watched
		if err != nil {
			c.emit(history.Release, history.Info, token, err.Error())
		} else {
			c.emit(history.Release, history.OK, token, nil)
		}
	}
}

func (c *client) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// read reads the unfenced register's value of the lock.
func (c *client) read(ctx context.Context) (int64, bool) {
	req, _ := http.NewRequestWithContext(ctx, "GET", c.cfg.register+"/read?"+url.Values{"lock": {c.cfg.lock}}.Encode(), nil)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var r readReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, false
	}
	return r.Value, true
}

// write sends the register the value with the token; the register stamps
// the outcome in the history. With a real store, it then writes the store
// through its fence and stamps the store's answer.
func (c *client) write(ctx context.Context, token, value int64) {
	c.emit(history.Write, history.Invoke, token, value)
	q := url.Values{"lock": {c.cfg.lock}, "p": {c.cfg.p}, "token": {strconv.FormatInt(token, 10)}, "value": {strconv.FormatInt(value, 10)}}
	req, _ := http.NewRequestWithContext(ctx, "POST", c.cfg.register+"/write?"+q.Encode(), nil)
	resp, err := c.http.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if c.store == nil {
		return
	}
	// No check of the lease between the two writes: the store sees what
	// the harness's register saw, a moment later.
	c.storeCall(ctx, token, value, func(ctx context.Context) error { return c.store.write(ctx, c.cfg.lock, token, value) })
}

// advance raises the real store's fence to token right after the grant,
// as a user of a fence does (the harness's register is not raised): from
// then on the store refuses the writes of every older holder.
func (c *client) advance(ctx context.Context, token int64) {
	if c.store != nil {
		c.storeCall(ctx, token, check.StoreAdvance, func(ctx context.Context) error { return c.store.advance(ctx, c.cfg.lock, token) })
	}
}

// storeCall makes call, a write of value or an advance, to the real store
// within a TTL, and stamps its invoke and its answer.
func (c *client) storeCall(ctx context.Context, token int64, value any, call func(context.Context) error) {
	c.emit(history.Store, history.Invoke, token, value)
	sctx, cancel := context.WithTimeout(ctx, c.cfg.ttl)
	err := call(sctx)
	cancel()
	switch {
	case err == nil:
		c.emit(history.Store, history.OK, token, value)
	case errors.Is(err, fencing.ErrStale):
		c.emit(history.Store, history.Fail, token, err.Error())
	default:
		c.emit(history.Store, history.Info, token, err.Error())
	}
}
