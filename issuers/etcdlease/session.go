package etcdlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// A shared is what the leases of one session, taken with one margin, share:
// one renewal stream of the session's etcd lease with its local deadline
// (a renewer), one watch stream that follows every lease's key (a
// watcher), and one follower of the session's end and of the client's
// connection. A lease is a thin view on it: its key, its token, its
// controller. Its cost grows with the leases only by their entries in two
// maps.
//
// A shared is made by the first Lock, Campaign or Locker call of its
// session and margin, and lives while a lease or a call holds it, and
// linger after the last, so that a lock taken after a release finds its
// renewal confirmed; it ends when the session does, or when its renewals
// fail (the deadline passed, etcd has no lease of the session or refused
// to renew it). Then every lease on it is lost, and the next call makes a
// new one. What one failure costs the leases on it, its blast radius:
//
//   - the renewals fail: every lease on it is lost at the one deadline
//     they share, as a lease of its own renewer would be at the same
//     moment;
//   - the watch stream breaks: it is opened again, and each key's watch
//     resumes from the revision after the last it saw, so nothing is lost
//     (the deadline still runs); its member has no leader, or etcd ends it
//     for good: every lease on it is lost with [ErrClusterLost];
//   - the client's connection can reach no endpoint: every lease on it is
//     lost with [ErrClusterLost], and the shared goes on renewing for the
//     leases to come.
//
// A holder that wants leases isolated from one another's faults gives them
// sessions of their own.
type shared struct {
	key  sharedKey
	s    *concurrency.Session
	r    *renewer
	w    *watcher
	conn *grpc.ClientConn

	cancel context.CancelFunc // ends the context of its goroutines
	kill   chan struct{}      // closed once: the shared ends
	killed sync.Once

	refs   int         // leases and calls that hold it; registry.mu guards it
	gone   bool        // unregistered; registry.mu guards it
	linger *time.Timer // registry.mu guards it

	mu     sync.Mutex
	leases map[*Lease]struct{}
	cause  error // the end's loss, once the shared ended
}

// sharedKey names the shared of a session and a margin (< 0: the default).
type sharedKey struct {
	s      *concurrency.Session
	margin time.Duration
}

// registry holds the shareds that live.
var registry = struct {
	mu sync.Mutex
	m  map[sharedKey]*shared
}{m: make(map[sharedKey]*shared)}

// minLinger is the least time a shared outlives its last lease; it
// lingers the TTL etcd granted if that is longer.
const minLinger = time.Second

// acquire returns the shared of session s with opts, held for the caller,
// once etcd confirmed a renewal on it: the local deadline then has its
// start. The caller gives it back with release, or hands it to a lease.
func acquire(ctx context.Context, s *concurrency.Session, opts []Option) (*shared, error) {
	o, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := checkSession(s, true); err != nil {
		return nil, err
	}
	k := sharedKey{s: s, margin: o.margin}
	registry.mu.Lock()
	sh := registry.m[k]
	made := sh == nil
	if made {
		sh = newShared(k)
		registry.m[k] = sh
	}
	sh.refs++
	if sh.linger != nil {
		sh.linger.Stop()
		sh.linger = nil
	}
	registry.mu.Unlock()
	if made {
		// Outside registry.mu: a renewer that failed already ends the
		// shared at once, which unregisters it.
		sh.r.attach(sh.end)
	}
	if err := sh.r.waitFirst(ctx, s, s.Done()); err != nil {
		sh.release()
		return nil, err
	}
	return sh, nil
}

// newShared starts the shared of k.
func newShared(k sharedKey) *shared {
	ctx, cancel := context.WithCancel(context.Background())
	sh := &shared{
		key:    k,
		s:      k.s,
		r:      newRenewer(k.s, k.margin),
		conn:   k.s.Client().ActiveConnection(),
		cancel: cancel,
		kill:   make(chan struct{}),
		leases: make(map[*Lease]struct{}),
	}
	sh.w = newWatcher(sh)
	go sh.run()
	go sh.w.run(ctx)
	go sh.followConn(ctx)
	return sh
}

// run ends the shared when its session ends or someone else ends it, and
// then stops its goroutines and the renewer's.
func (sh *shared) run() {
	select {
	case <-sh.s.Done():
		sh.end(sessionEnded(sh.s, sh.r))
	case <-sh.kill:
	}
	sh.cancel()
	sh.r.stop()
}

// release gives back a hold taken by acquire. After the last, the shared
// lingers, then ends if no one took it again.
func (sh *shared) release() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if sh.refs--; sh.refs > 0 || sh.gone {
		return
	}
	ttl := sh.r.grantedTTL()
	if ttl == 0 {
		// No renewal was ever confirmed: nothing to keep for the next call.
		sh.unregister()
		sh.killed.Do(func() { close(sh.kill) })
		return
	}
	d := max(ttl, minLinger)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		registry.mu.Lock()
		idle := sh.linger == t && sh.refs == 0 && !sh.gone
		if idle {
			sh.unregister()
		}
		registry.mu.Unlock()
		if idle {
			sh.killed.Do(func() { close(sh.kill) })
		}
	})
	sh.linger = t
}

// unregister makes the next call make a new shared; registry.mu is held.
func (sh *shared) unregister() {
	sh.gone = true
	if registry.m[sh.key] == sh {
		delete(registry.m, sh.key)
	}
	if sh.linger != nil {
		sh.linger.Stop()
		sh.linger = nil
	}
}

// end loses every lease on the shared with cause, first, and then ends the
// shared: the first cause wins.
func (sh *shared) end(cause error) {
	sh.mu.Lock()
	if sh.cause != nil {
		sh.mu.Unlock()
		return
	}
	sh.cause = cause
	leases := sh.take()
	sh.mu.Unlock()
	loseBatch(leases, cause)
	registry.mu.Lock()
	sh.unregister()
	registry.mu.Unlock()
	sh.killed.Do(func() { close(sh.kill) })
}

// loseAll loses every lease on the shared with cause; the shared goes on.
func (sh *shared) loseAll(cause error) {
	sh.mu.Lock()
	leases := sh.take()
	sh.mu.Unlock()
	loseBatch(leases, cause)
}

// take returns the leases on the shared; sh.mu is held.
func (sh *shared) take() []*Lease {
	leases := make([]*Lease, 0, len(sh.leases))
	for l := range sh.leases {
		leases = append(leases, l)
	}
	return leases
}

// attach puts l on the shared, whose hold l now has, and starts following
// its key. A shared that ended, or whose connection can reach no endpoint,
// loses l at once.
func (sh *shared) attach(l *Lease) {
	sh.mu.Lock()
	cause := sh.cause
	if cause == nil {
		sh.leases[l] = struct{}{}
		sh.w.add(l)
	}
	sh.mu.Unlock()
	if cause != nil {
		l.lose(cause)
		return
	}
	if sh.conn != nil {
		if st := sh.conn.GetState(); st == connectivity.TransientFailure || st == connectivity.Shutdown {
			l.lose(fmt.Errorf("%w: the client's connection to etcd is %v", ErrClusterLost, st))
		}
	}
}

// detach takes l off the shared and gives back its hold; it is called once
// per lease, at its loss or its release.
func (sh *shared) detach(l *Lease) {
	sh.mu.Lock()
	delete(sh.leases, l)
	sh.w.remove(l)
	sh.mu.Unlock()
	sh.release()
}

// followConn loses every lease on the shared when the client's connection
// can reach no etcd endpoint, and returns when ctx ends.
//
// The connection is the client's view of the whole cluster: it stays ready
// while any endpoint answers. Once it fails, the holder would learn of a
// revocation or a takeover only after reconnecting, and its session cannot
// renew, so the leases are lost at once rather than when the session's TTL
// runs out. A connection that drops and comes straight back passes through
// connecting, not failure, and loses nothing (TestLockKeptThroughConnectionBlip).
func (sh *shared) followConn(ctx context.Context) {
	if sh.conn == nil {
		return
	}
	for {
		st := sh.conn.GetState()
		if st == connectivity.TransientFailure || st == connectivity.Shutdown {
			sh.loseAll(fmt.Errorf("%w: the client's connection to etcd is %v", ErrClusterLost, st))
		}
		if !sh.conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}
