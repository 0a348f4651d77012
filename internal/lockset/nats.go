package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease/internal/gobin"
	"github.com/zukhruf/lease/internal/lockset/history"
	"github.com/zukhruf/lease/issuers/natslease"
)

// natsServer is the nats-server that natslease's tests build into the
// user's cache folder (make nats-server), of the version that their module
// pins; NATS_SERVER overrides it.
var natsServer = gobin.Binary{
	Name:    "nats-server",
	Module:  "github.com/nats-io/nats-server/v2",
	Package: "github.com/nats-io/nats-server/v2",
	Dir:     gobin.Beside("../../issuers/natslease/internal/natstest/server"),
	Env:     "NATS_SERVER",
	Make:    "nats-server",
	Took:    "a cold build takes a few minutes on 2 cores",
}

// natsCommand returns the command of a nats-server with JetStream on port,
// its store in dir, which a restart after SIGKILL finds again.
func natsCommand(dir string, port int) (*exec.Cmd, error) {
	bin, err := natsServer.Ensure(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir, "-l", filepath.Join(dir, "log")), nil
}

// natsReady waits until JetStream at addr answers and the bucket of the
// runs' leases exists, with per-key TTLs.
func natsReady(addr string, exited <-chan struct{}) error {
	return waitServing("nats-server", 30*time.Second, exited, func(ctx context.Context) error {
		nc, err := nats.Connect("nats://"+addr, nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.CreateOrUpdateKeyValue(ctx, natslease.BucketConfig(natslease.DefaultBucket, 1))
		return err
	})
}

func (r *runner) startNATS() (string, error) {
	return r.serve(func(port int) (*exec.Cmd, error) {
		return natsCommand(filepath.Join(r.dir, "server"), port)
	}, false, natsReady)
}

// natsDeleteKey deletes lock's key as an operator would.
func (r *runner) natsDeleteKey(ctx context.Context, lock string) (int64, bool) {
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", r.serverPort), nats.Timeout(r.ttl), nats.NoReconnect())
	if err != nil {
		return 0, false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, false
	}
	kv, err := js.KeyValue(ctx, natslease.DefaultBucket)
	if err != nil {
		return 0, false
	}
	if _, err := kv.Get(ctx, natsKey(lock)); err != nil {
		return 0, false
	}
	at := history.Now()
	return at, kv.Delete(ctx, natsKey(lock)) == nil
}

func natsKey(lock string) string { return "lockset." + lock }

// natsLocker takes the lock with natslease (side lease) or by hand on the
// KV bucket (side peer): Create with a per-key TTL, then Update at the last
// revision every third of the TTL, as users write it, its token the
// Create's revision.
type natsLocker struct {
	cfg clientConfig
	nc  *nats.Conn
	kv  jetstream.KeyValue
}

func newNATSLocker(c clientConfig) (*natsLocker, error) {
	nc, err := nats.Connect("nats://"+c.endpoint, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.Timeout(c.ttl/2), nats.RetryOnFailedConnect(true),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	l := &natsLocker{cfg: c, nc: nc}
	if c.side == "peer" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for {
			if l.kv, err = js.KeyValue(ctx, natslease.DefaultBucket); err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
	}
	return l, nil
}

func (l *natsLocker) close() { l.nc.Close() }

func (l *natsLocker) acquire(ctx context.Context, lock string) (holding, error) {
	if l.cfg.side == "peer" {
		return l.acquireByHand(ctx, natsKey(lock))
	}
	le, err := natslease.Config{TTL: l.cfg.ttl}.Lock(ctx, l.nc, natsKey(lock))
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	return leaseHolding{sig: le.Signal(), tok: le.Token(), unlock: le.Unlock}, nil
}

func (l *natsLocker) acquireByHand(ctx context.Context, key string) (holding, error) {
	for {
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, l.cfg.ttl)
		rev, err := l.kv.Create(cctx, key, []byte(l.cfg.p), jetstream.KeyTTL(l.cfg.ttl))
		cancel()
		if err == nil {
			h := &natsHandHolding{kv: l.kv, key: key, value: []byte(l.cfg.p), rev: rev, tok: int64(rev),
				lostC: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
			h.until.Store(sent.Add(l.cfg.ttl).UnixNano())
			go h.update(l.cfg.ttl)
			return h, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errUnknown, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", errUnknown, ctx.Err())
		case <-time.After(l.cfg.ttl / 8):
		}
	}
}

// natsHandHolding is a key held by hand: updated every third of the TTL;
// held while the TTL from the last confirmed write has not passed and no
// update failed for good.
type natsHandHolding struct {
	kv       jetstream.KeyValue
	key      string
	value    []byte
	rev      uint64 // the update goroutine's, then the release's
	tok      int64
	until    atomic.Int64
	lostC    chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func (h *natsHandHolding) update(ttl time.Duration) {
	defer close(h.done)
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
		rev, err := h.kv.Update(ctx, h.key, h.value, h.rev)
		cancel()
		if err != nil {
			if time.Now().UnixNano() >= h.until.Load() {
				h.lose()
				return
			}
			continue
		}
		h.rev = rev
		h.until.Store(sent.Add(ttl).UnixNano())
	}
}

func (h *natsHandHolding) lose() { h.lostOnce.Do(func() { close(h.lostC) }) }

func (h *natsHandHolding) token() int64          { return h.tok }
func (h *natsHandHolding) lost() <-chan struct{} { return h.lostC }
func (h *natsHandHolding) held() bool {
	select {
	case <-h.lostC:
		return false
	default:
		return time.Now().UnixNano() < h.until.Load()
	}
}
func (h *natsHandHolding) release(ctx context.Context) error {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
	return h.kv.Delete(ctx, h.key, jetstream.LastRevision(h.rev))
}
