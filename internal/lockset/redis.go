package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/internal/lockset/fakeclock"
	"github.com/zukhruf/lease/issuers/redislease"
)

// redisServerBin is Debian's redis-server; REDIS_SERVER overrides it.
func redisServerBin() string {
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		return b
	}
	return "/usr/bin/redis-server"
}

// redisCommand returns the command of a Redis server on port with its data
// in dir, kept in an append-only file written through on each command, so
// that a restart after SIGKILL finds every confirmed write; a restart
// without persistence (kill-server-wipe) removes the folder first.
func redisCommand(dir string, port int) (*exec.Cmd, error) {
	bin := redisServerBin()
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s not found (set REDIS_SERVER): install the Debian package redis-server (make redis-deps): %w", bin, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no", "--logfile", filepath.Join(dir, "log")), nil
}

// redisReady waits until the server at addr answers PING, or exited closes.
func redisReady(addr string, exited <-chan struct{}) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	return waitServing("redis-server", 30*time.Second, exited, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
}

// redisClock returns a reader of the Redis server's clock (TIME), on a
// connection of its own, outside the faults, and its close.
func (r *runner) redisClock() (fakeclock.Reader, func() error) {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.serverPort), DialTimeout: r.ttl, MaxRetries: -1})
	return func() (fakeclock.Reading, error) {
		ctx, cancel := context.WithTimeout(context.Background(), r.ttl)
		defer cancel()
		sent := time.Now()
		shows, err := rdb.Time(ctx).Result()
		return fakeclock.Reading{Shows: shows, Sent: sent, Answered: time.Now()}, err
	}, rdb.Close
}

// freePort returns a port the kernel had free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// redisLocker takes the lock with redislease (side lease) or redsync's
// Mutex (side peer), extended every third of the TTL in the background as
// its users do, with a token from INCR after the grant (redsync has none).
type redisLocker struct {
	cfg clientConfig
	rdb redis.UniversalClient
	rs  *redsync.Redsync
}

// quiet is go-redis's logger in a client process: its dial errors during
// a fault are the fault, and would drown the run's output.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func newRedisLocker(c clientConfig) (*redisLocker, error) {
	redis.SetLogger(quiet{})
	var rdb redis.UniversalClient
	dialer := routeDialer(strings.Split(c.servers, ","), strings.Split(c.endpoint, ","), c.ttl/2)
	switch group := strings.Fields(os.Getenv(redisGroupEnv)); {
	case len(group) == 3 && group[0] == "sentinel":
		// The sentinel mix: the client asks the Sentinels for the
		// primary, and dials it through this process's proxy of it.
		rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: group[1], SentinelAddrs: strings.Split(group[2], ","),
			Dialer: dialer, DialTimeout: c.ttl / 2, ReadTimeout: c.ttl / 2, WriteTimeout: c.ttl / 2})
	case len(group) == 1 && group[0] == "cluster":
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(c.servers, ","),
			Dialer: dialer, DialTimeout: c.ttl / 2, ReadTimeout: c.ttl / 2, WriteTimeout: c.ttl / 2})
	default:
		rdb = redis.NewClient(&redis.Options{Addr: c.endpoint, DialTimeout: c.ttl / 2, ReadTimeout: c.ttl / 2, WriteTimeout: c.ttl / 2})
	}
	return &redisLocker{cfg: c, rdb: rdb, rs: redsync.New(goredis.NewPool(rdb))}, nil
}

func (l *redisLocker) close() { l.rdb.Close() }

func (l *redisLocker) acquire(ctx context.Context, lock string) (holding, error) {
	key := "lockset:" + lock
	if l.cfg.side == "peer" {
		return l.acquireRedsync(ctx, key)
	}
	le, err := redislease.Config{TTL: l.cfg.ttl}.Lock(ctx, l.rdb, key)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	return leaseHolding{sig: le.Signal(), tok: le.Token(), unlock: le.Unlock}, nil
}

func (l *redisLocker) acquireRedsync(ctx context.Context, key string) (holding, error) {
	m := l.rs.NewMutex(key, redsync.WithExpiry(l.cfg.ttl), redsync.WithTries(1<<30), redsync.WithRetryDelay(l.cfg.ttl/8))
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	token, err := l.rdb.Incr(ctx, key+":token").Result()
	if err != nil {
		m.UnlockContext(context.Background())
		return nil, fmt.Errorf("the token: %w", err)
	}
	h := &redsyncHolding{m: m, tok: token, lostC: make(chan struct{}), stop: make(chan struct{}), extended: make(chan struct{})}
	h.until.Store(m.Until().UnixNano())
	go h.extend(l.cfg.ttl / 3)
	return h, nil
}

// redsyncHolding is redsync's Mutex, held the usual way: extended every
// period; held while Until has not passed and no extension failed.
type redsyncHolding struct {
	m        *redsync.Mutex
	until    atomic.Int64 // m.Until() in Unix nanoseconds: the Mutex is not safe for concurrent use
	tok      int64
	lostC    chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	extended chan struct{} // closed when extend returns: the Mutex is the caller's again
}

func (h *redsyncHolding) extend(period time.Duration) {
	defer close(h.extended)
	t := time.NewTicker(period)
	defer t.Stop()
	expiry := time.NewTimer(time.Until(h.m.Until()))
	defer expiry.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-expiry.C:
			h.lose()
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), period)
			ok, err := h.m.ExtendContext(ctx)
			cancel()
			if !ok || err != nil {
				if time.Now().After(h.m.Until()) {
					h.lose()
					return
				}
				continue
			}
			h.until.Store(h.m.Until().UnixNano())
			expiry.Reset(time.Until(h.m.Until()))
		}
	}
}

func (h *redsyncHolding) lose() { h.lostOnce.Do(func() { close(h.lostC) }) }

func (h *redsyncHolding) token() int64          { return h.tok }
func (h *redsyncHolding) lost() <-chan struct{} { return h.lostC }
func (h *redsyncHolding) held() bool {
	select {
	case <-h.lostC:
		return false
	default:
		return time.Now().UnixNano() < h.until.Load()
	}
}
func (h *redsyncHolding) release(ctx context.Context) error {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.extended
	_, err := h.m.UnlockContext(ctx)
	return err
}
