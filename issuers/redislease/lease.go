package redislease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/signal"
)

// Lease is a claim on a Redis key, and the lease that tells its holder when
// the claim is gone.
//
// A Lease is made by [Lock] or [Config.Lock]; there is no useful zero value.
// Its methods are safe for concurrent use. Its session renews the key,
// tracks it and keeps the lease's local deadline, on connections the
// leases of one client share, all of it until the loss or the release,
// whichever comes first.
type Lease struct {
	ctrl  *controller.Controller
	ep    *endpoint
	key   string
	ckey  string // the key's claim (see grantScript)
	value string // "id:token", what the key holds while it is this lease's
	token int64
	cfg   Config
	need  int // replicas that must acknowledge a renewal
	// server is the address of the server the key was last confirmed on:
	// the grant's, then that of each renewal that found the key (a Cluster
	// slot's new primary after a migration or a failover).
	server atomic.Pointer[string]

	// sess is the session the lease shares with the other leases of its
	// client (on a Cluster, of its client and its slot's node); next is
	// when its session renews it next, guarded by the session's mutex.
	sess *session
	next time.Time
	// mv guards sess, which changes when a Cluster slot moves, and gone,
	// set once the lease was lost or released: it moves no more.
	mv   sync.Mutex
	gone bool
	// asking is set while the lease's Cluster slot migrates to its
	// session's node: its commands there go behind ASKING. Guarded by
	// the session's mutex.
	asking bool

	deadline deadline

	once sync.Once
	err  error // the release's outcome, set once

	watch health.Watch // warns an observer as the deadline nears unrenewed
	obsMu sync.Mutex   // orders the renewals' events before the loss's
}

// Lock waits until this caller holds key, and returns its lease. The
// signal's subject is the key.
//
// The key is free when it does not exist: Lock writes it, with the TTL as
// its expiry, and counts the lease's fencing token in the same atomic
// script, in a counter in the key's hash slot (the key with the suffix
// ":redislease-token", inside {…} unless the key has a hash tag of its own).
// Beside it, the key's claim (suffix ":redislease-claim") holds the same
// value with the same expiry: the key is not free while another lease's
// claim lives, so an operator's DEL of a held key frees it only once its
// holder, whom the deletion loses at once, gives the claim back with
// Unlock, or the claim expires. While it waits, Lock tracks the key and its
// claim (CLIENT TRACKING), so a release or a deletion is taken at once, and
// it tries again when the holder's key expires.
//
// rdb is a *redis.Client, a Sentinel client (redis.NewFailoverClient) or a
// *redis.ClusterClient. The lease reads from it only its options and, on a
// Cluster, the node of the key's slot: it dials connections of its own,
// with rdb's dialer, credentials and database, which no caller can use,
// close or kill without the lease noticing. Closing rdb later does not end
// the lease. The leases of one client share one session: two connections
// to its server (behind Sentinel, the primary its Sentinels name at each
// dial; on a Cluster, one session on each primary that serves a slot of
// their keys) and four goroutines, dialed by its first Lock and closed a
// minute after its last lease ends, or as soon as rdb is closed and no
// lease is held; a Lock on a session that is up sends one write (behind
// Sentinel, three: the replicas' ages, the grant, and a Sentinel's name of
// the primary) and keeps no connection of its own. The README's "Many
// leases, one session" says what a failure of a session's connection does
// to its leases.
//
// ctx bounds the wait only; a Lock it cuts leaves no goroutine and no key
// behind. A mistake fails the first attempt and returns at once: a wrong
// address or password, a missing permission (the lease needs HELLO, EVAL,
// WAIT, ROLE, GET, PTTL and CLIENT TRACKING, and in its scripts TIME,
// INCR, SET, PEXPIRE and DEL; SELECT with a database other than 0; ASKING
// on a Cluster; CLIENT LIST behind Sentinel, and ROLE there even with
// Config.Replicas), a replica's address, an invalid Config. Later failures are retried until ctx ends. The lease lasts
// until it is lost or [Lease.Unlock] is called; a grant whose answer came
// after its deadline gives a lease already lost.
func (c Config) Lock(ctx context.Context, rdb redis.UniversalClient, key string) (*Lease, error) {
	return c.lock(ctx, rdb, key, false)
}

// lock is Lock, and TryLock if try: one path to the grant script for both.
func (c Config) lock(ctx context.Context, rdb redis.UniversalClient, key string, try bool) (*Lease, error) {
	call := "lock"
	if try {
		call = "trylock"
	}
	if ctx == nil {
		if try {
			panic("redislease: TryLock called with a nil context")
		}
		panic("redislease: Lock called with a nil context")
	}
	begun := time.Now()
	tkey, err := tokenKey(key)
	if err != nil {
		return nil, fmt.Errorf("redislease: %s %q: %w", call, key, err)
	}
	ckey, _ := claimKey(key) // valid where tkey is
	c, err = c.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("redislease: %s %q: %w", call, key, err)
	}
	ep, err := newEndpoint(rdb, key, c.TTL)
	if err != nil {
		return nil, fmt.Errorf("redislease: %s %q: %w", call, key, err)
	}
	if closed(rdb) {
		return nil, fmt.Errorf("redislease: %s %q: %w", call, key, redis.ErrClosed)
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return c.lockShared(ctx, rdb, ep, call, key, tkey, ckey, id, try, begun)
}

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (l *Lease) Signal() *signal.Signal { return l.ctrl.Signal() }

// Token returns the fencing token of this lease: the value of the key's
// token counter that the script granting the key counted. Every later
// holder of the key has a larger one, even if the key was deleted in
// between, since the counter is a key of its own that the lease never
// deletes; and across a failover, since the counter is written in the same
// script as the key and confirmed to the same replicas. A resource that
// remembers the largest token it accepted and refuses smaller ones refuses a
// holder that lost its lease, even one whose signal has not told it yet.
//
// A grant's token is the counter plus one or the server's clock in
// microseconds, whichever is larger: so a counter erased with the data (a
// FLUSHALL, a primary restarted without persistence) goes on above every
// token counted before, and of two primaries left by a failover, each
// counting on its own copy, the later grant has the larger token, as long
// as the servers' clocks agree to within the time between two grants (see
// the README's "The token").
func (l *Lease) Token() int64 { return l.token }

// Unlock releases the lease: it ends the signal first, so that nothing seen
// afterwards loses it, not even the deletion the release itself makes; it
// stops renewing and tracking the key; then it deletes the key if the key
// still holds this lease, so that a waiting Lock is granted at once, on the
// connection that renewed it (a new one only if that one failed, so that a
// server at its connection limit does not keep the key). A key
// that holds another lease is left alone. ctx bounds the release; a ctx
// that has ended already still sends it, detached, for at most
// [ReleaseTimeout]; a lease
// lost before Unlock stays lost, and its key is deleted all the same if it
// is still this lease's.
//
// Unlock returns the error Redis gave to the deletion, if any: the key then
// stays until it expires. Successive calls return the first call's result.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("redislease: Unlock called with a nil context")
	}
	l.once.Do(func() {
		defer l.released()
		ctx, cancel := releaseContext(ctx)
		defer cancel()
		l.unlockShared(ctx)
	})
	return l.err
}

func (l *Lease) setServer(addr string) { l.server.Store(&addr) }

// lose loses the lease with cause, unless it was released, and stops
// renewing and following it.
func (l *Lease) lose(cause error) { l.loseVia(health.Push, cause) }

// loseVia loses the lease with cause, learned via, and reports the loss to
// the observer after it.
func (l *Lease) loseVia(via health.Via, cause error) {
	won := l.ctrl.Lose(cause)
	l.deadline.stop()
	l.leave().forget(l)
	if won {
		l.lost(via)
	}
}

// leave marks l gone from its session, which it returns: it moves no
// more.
func (l *Lease) leave() *session {
	l.mv.Lock()
	defer l.mv.Unlock()
	l.gone = true
	return l.sess
}

// lockShared is lock on a session of rdb: its server's, its primary's
// behind Sentinel, or on a Cluster the session of the node that serves
// the key's slot.
func (c Config) lockShared(ctx context.Context, rdb redis.UniversalClient, ep *endpoint, call, key, tkey, ckey, id string, try bool, begun time.Time) (*Lease, error) {
	g, err := c.acquireShared(ctx, rdb, ep, key, tkey, ckey, id, try)
	if err != nil {
		return nil, fmt.Errorf("redislease: %s %q: %w", call, key, err)
	}
	s := g.sess
	l := &Lease{
		ctrl:  controller.New(key),
		ep:    ep,
		key:   key,
		ckey:  ckey,
		value: id + ":" + strconv.FormatInt(g.token, 10),
		token: g.token,
		cfg:   c,
		need:  g.need,
		sess:  s,
		next:  g.sent.Add(c.RenewPeriod),
	}
	l.setServer(g.addr)
	l.deadline.start(c, g.sent, l.loseAtDeadline)
	l.granted(begun)
	s.hold(l)
	return l, nil
}

// unlockShared is Unlock of a lease on a session: the release runs on the
// session's command connection, or on a Cluster on that of the node a
// redirection names.
func (l *Lease) unlockShared(ctx context.Context) {
	l.ctrl.End()
	l.deadline.stop()
	from := l.leave()
	s := join(from.key, from.ep, l.cfg.TTL) // kept open for the release
	defer s.leave()
	from.forget(l)
	r, at, err := s.send(ctx, []any{"EVAL", unlockScript, "2", l.key, l.ckey, l.value})
	if err == nil {
		err = r.err
	}
	// The release pushes nothing to this session's own Locks (NOLOOP).
	at.wake(l.key)
	at.wake(l.ckey)
	if err != nil {
		l.err = fmt.Errorf("redislease: unlock %q: %w", l.key, err)
	}
}

// closed reports whether rdb was closed: a closed go-redis client answers
// every command with redis.ErrClosed before it looks at the context or the
// network, so a command with a context already cut asks nothing of the
// server.
func closed(rdb redis.UniversalClient) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return errors.Is(rdb.Ping(ctx).Err(), redis.ErrClosed)
}
