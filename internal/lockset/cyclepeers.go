package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/mysqllease"
	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/signal"
)

// The clients of the lock-cycle table. Each pool is sized for the 32
// goroutines of the throughput, the same for the issuer and its peers.
const cyclePool = 64

// lockerFunc is a Locker made of a function.
type lockerFunc func(ctx context.Context, subject string) (lease.Lease, error)

func (f lockerFunc) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	return f(ctx, subject)
}

// peerLease is a peer's lock seen as a lease.Lease: a signal that is never
// lost, the peer's token or 0, and the peer's release, made once.
type peerLease struct {
	ctrl    *controller.Controller
	token   int64
	release func(context.Context) error
	once    sync.Once
	err     error
}

func newPeerLease(subject string, token int64, release func(context.Context) error) *peerLease {
	return &peerLease{ctrl: controller.New(subject), token: token, release: release}
}

func (l *peerLease) Signal() *signal.Signal { return l.ctrl.Signal() }
func (l *peerLease) Token() int64           { return l.token }
func (l *peerLease) Unlock(ctx context.Context) error {
	l.once.Do(func() {
		l.ctrl.End()
		l.err = l.release(ctx)
	})
	return l.err
}

// The ways a waiter learns that the subject is free, as the table says.
const (
	learnsServerWait = "push: the server's wait"
	learnsWatch      = "push: a watch"
)

var redisCycle = cycleCoordinator{
	issuer: "redis",
	name:   "Redis",
	version: func(ctx context.Context, _ *runner, addr string) (string, error) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		info, err := rdb.Info(ctx, "server").Result()
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("no redis_version in INFO: %w", err)
	},
	clients: []cycleClient{
		{name: "redislease", learns: "push: the key's tracking (CLIENT TRACKING)", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			rdb := newCycleRedis(addr)
			return redislease.NewLocker(rdb, redislease.Config{}), func() { rdb.Close() }, nil
		}},
		{name: "redsync Mutex", learns: "poll at 50–250 ms (redsync's default, at random; 32 tries)", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			rdb := newCycleRedis(addr)
			rs := redsync.New(goredis.NewPool(rdb))
			return lockerFunc(func(ctx context.Context, subject string) (lease.Lease, error) {
				m := rs.NewMutex(subject)
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return newPeerLease(subject, 0, func(ctx context.Context) error {
					_, err := m.UnlockContext(ctx)
					return err
				}), nil
			}), func() { rdb.Close() }, nil
		}, poll: 250 * time.Millisecond},
		{name: "bsm/redislock", learns: "poll at 10 ms (linear retry, set here: its default is none)", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			rdb := newCycleRedis(addr)
			c := redislock.New(rdb)
			opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}
			return lockerFunc(func(ctx context.Context, subject string) (lease.Lease, error) {
				l, err := c.Obtain(ctx, subject, 10*time.Second, opt)
				if err != nil {
					return nil, err
				}
				return newPeerLease(subject, 0, l.Release), nil
			}), func() { rdb.Close() }, nil
		}},
		{name: "SET NX PX + EVAL", learns: "poll at 10 ms (set here)", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			rdb := newCycleRedis(addr)
			return lockerFunc(func(ctx context.Context, subject string) (lease.Lease, error) {
				return setNXLock(ctx, rdb, subject)
			}), func() { rdb.Close() }, nil
		}},
	},
}

func newCycleRedis(addr string) *redis.Client {
	redis.SetLogger(quiet{})
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: cyclePool})
}

// compareAndDelete deletes KEYS[1] if it still holds ARGV[1].
const compareAndDelete = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// setNXLock is the floor of a Redis lock, by hand: SET key value NX PX
// every 10 ms until it is set; released by a compare-and-delete.
func setNXLock(ctx context.Context, rdb *redis.Client, key string) (lease.Lease, error) {
	var b [16]byte
	rand.Read(b[:])
	value := hex.EncodeToString(b[:])
	for {
		ok, err := rdb.SetNX(ctx, key, value, 10*time.Second).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return newPeerLease(key, 0, func(ctx context.Context) error {
				return rdb.Eval(ctx, compareAndDelete, []string{key}, value).Err()
			}), nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

var etcdCycle = cycleCoordinator{
	issuer: "etcd",
	name:   "etcd",
	version: func(ctx context.Context, _ *runner, addr string) (string, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
		if err != nil {
			return "", err
		}
		defer cli.Close()
		st, err := cli.Status(ctx, addr)
		if err != nil {
			return "", err
		}
		return st.Version, nil
	},
	clients: []cycleClient{
		{name: "etcdlease", learns: learnsWatch + " (the key before it)", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			s, closeS, err := newCycleSession(addr)
			if err != nil {
				return nil, nil, err
			}
			return etcdlease.NewLocker(s), closeS, nil
		}},
		{name: "concurrency.Mutex", learns: learnsWatch + " (the key before it)", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			s, closeS, err := newCycleSession(addr)
			if err != nil {
				return nil, nil, err
			}
			return lockerFunc(func(ctx context.Context, subject string) (lease.Lease, error) {
				m := concurrency.NewMutex(s, "/cycle-mutex/"+subject)
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return newPeerLease(subject, m.Header().Revision, m.Unlock), nil
			}), closeS, nil
		}},
	},
}

// newCycleSession returns a session on a client of its own, and its close.
func newCycleSession(addr string) (*concurrency.Session, func(), error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	s, err := concurrency.NewSession(cli)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return s, func() { s.Close(); cli.Close() }, nil
}

var pgCycle = cycleCoordinator{
	issuer: "pg",
	name:   "PostgreSQL",
	version: func(ctx context.Context, _ *runner, addr string) (string, error) {
		pool, err := pgxpool.New(ctx, pgConnString(addr))
		if err != nil {
			return "", err
		}
		defer pool.Close()
		var v string
		err = pool.QueryRow(ctx, "SHOW server_version").Scan(&v)
		return v, err
	},
	clients: []cycleClient{
		{name: "pglease", learns: "push: the release's notify (LISTEN/NOTIFY); else a try, at most 500 ms apart", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			pool, err := newCyclePool(ctx, addr)
			if err != nil {
				return nil, nil, err
			}
			return pglease.NewLocker(pool, pglease.Config{}), pool.Close, nil
		}},
		{name: "pg_advisory_lock by hand", learns: learnsServerWait, open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			pool, err := newCyclePool(ctx, addr)
			if err != nil {
				return nil, nil, err
			}
			return lockerFunc(func(ctx context.Context, subject string) (lease.Lease, error) {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					return nil, err
				}
				key := pglease.Key(subject)
				if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
					// A cut wait may have been granted: the session goes.
					conn.Conn().Close(context.Background())
					conn.Release()
					return nil, err
				}
				return newPeerLease(subject, 0, func(ctx context.Context) error {
					defer conn.Release()
					var released bool
					if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&released); err != nil {
						conn.Conn().Close(context.Background())
						return err
					}
					if !released {
						return errors.New("pg_advisory_unlock: the session did not hold the lock")
					}
					return nil
				}), nil
			}), pool.Close, nil
		}},
	},
}

func newCyclePool(ctx context.Context, addr string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(pgConnString(addr))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = cyclePool
	return pgxpool.NewWithConfig(ctx, cfg)
}

var mysqlCycle = cycleCoordinator{
	issuer: "mysql",
	name:   "MariaDB",
	version: func(ctx context.Context, _ *runner, addr string) (string, error) {
		db, err := sql.Open("mysql", mysqlDSN(addr))
		if err != nil {
			return "", err
		}
		defer db.Close()
		var v string
		err = db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v)
		return v, err
	},
	clients: []cycleClient{
		{name: "mysqllease", learns: learnsServerWait + " (GET_LOCK, in steps of its heartbeat, 1 s)", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			db, err := newCycleDB(addr)
			if err != nil {
				return nil, nil, err
			}
			return mysqllease.NewLocker(db, mysqllease.Config{}), func() { db.Close() }, nil
		}},
		{name: "GET_LOCK by hand", learns: learnsServerWait, open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			db, err := newCycleDB(addr)
			if err != nil {
				return nil, nil, err
			}
			return lockerFunc(func(ctx context.Context, subject string) (lease.Lease, error) {
				return getLock(ctx, db, subject)
			}), func() { db.Close() }, nil
		}},
	},
}

func newCycleDB(addr string) (*sql.DB, error) {
	db, err := sql.Open("mysql", mysqlDSN(addr))
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(cyclePool)
	return db, nil
}

// getLock takes name with GET_LOCK on a connection held for the lease,
// waiting until ctx's deadline at most; released by RELEASE_LOCK.
func getLock(ctx context.Context, db *sql.DB, name string) (lease.Lease, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	drop := func() {
		// A session that may hold the lock serves no other statement.
		conn.Raw(func(any) error { return driver.ErrBadConn })
		conn.Close()
	}
	wait := 60
	if dl, ok := ctx.Deadline(); ok {
		wait = max(1, int(math.Ceil(time.Until(dl).Seconds())))
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, wait).Scan(&got); err != nil {
		drop()
		return nil, err
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil, fmt.Errorf("GET_LOCK(%q, %d) returned %v", name, wait, got)
	}
	return newPeerLease(name, 0, func(ctx context.Context) error {
		var released sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&released); err != nil {
			drop()
			return err
		}
		conn.Close()
		if released.Int64 != 1 {
			return fmt.Errorf("RELEASE_LOCK(%q) returned %v", name, released)
		}
		return nil
	}), nil
}
