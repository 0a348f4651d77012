package natslease

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/signal"
)

// Lease is a claim on a key of a NATS JetStream KV bucket, and the lease
// that tells its holder when the claim is gone.
//
// A Lease is made by [Lock] or [Config.Lock]; there is no useful zero value.
// Its methods are safe for concurrent use. It is a thin view of its
// client's session, which renews, follows and keeps the deadline of every
// lease of the client (see [Config.Lock]).
type Lease struct {
	ctrl    *controller.Controller
	sess    *session
	key     string
	value   []byte // what the key holds while it is this lease's, unique to it
	cfg     Config
	granted uint64        // the grant's revision: the token
	rev     atomic.Uint64 // the key's last revision written by this lease

	// next is when the session renews the lease next, renewing whether a
	// worker has it; both guarded by the session's mutex.
	next     time.Time
	renewing bool

	deadline deadline
	watch    health.Watch // warns an observer as the deadline nears unrenewed
	obsMu    sync.Mutex   // orders the renewals' events before the loss's
	rmu      sync.Mutex   // held by a renewal, so that Unlock releases after it
	released atomic.Bool  // Unlock began: no renewal from then on
	leave    sync.Once    // the lease's count in its session, given back once

	once sync.Once
	err  error // the release's outcome, set once
}

// Lock waits until this caller holds key in the Config's bucket, and
// returns its lease. The signal's subject is the key.
//
// The key is free when it does not exist or its last entry is a delete or
// purge marker (an expiry leaves one): Lock writes it by a Create with the
// TTL as its per-key TTL, and the lease renews it every RenewPeriod by a
// write at its last revision with the same TTL. A waiting Lock is woken by
// the marker of a release, a deletion or an expiry, and tries again at the
// latest every RetryPeriod.
//
// nc gives the lease only its options: the leases of one nc and bucket
// share one session, a connection of the issuer's own dialled with nc's
// servers, credentials and TLS, which no caller can use or close, with one
// watcher of the bucket, one renewer and a fixed pool of renewal workers
// (no goroutine or subscription per lease). Its first Lock dials it; its
// last lease's end closes it. Closing nc later does not end the lease. The
// README's "Many leases, one session" says what a failure of the session's
// connection does to its leases.
//
// ctx bounds the wait only; a Lock it cuts leaves no goroutine and no key
// behind. A mistake fails at once, naming the call that found it: a key
// the bucket cannot take, an invalid Config, a closed nc, credentials the
// server refuses, an account without JetStream, a bucket that does not
// exist, does not allow per-key TTLs or expires keys before the TTL, a
// permission missing to publish to the key's subject. Later failures are
// retried, with backoff, until ctx ends. The lease lasts until it is lost
// or [Lease.Unlock] is called; a grant whose answer came after its
// deadline gives a lease already lost.
func (c Config) Lock(ctx context.Context, nc *nats.Conn, key string) (*Lease, error) {
	return c.lock(ctx, nc, key, false)
}

// Signal returns the holder's view of the lease. Successive calls return the
// same *signal.Signal.
func (l *Lease) Signal() *signal.Signal { return l.ctrl.Signal() }

// Token returns the fencing token of this lease: the revision of its
// grant, the sequence of the bucket's stream at which the server stored it.
// Every later holder of the key has a larger one, even if the key was
// deleted or purged in between, since a stream's sequence only grows. A
// bucket deleted and created again starts its sequence again: its tokens
// start again too.
func (l *Lease) Token() int64 { return int64(l.granted) }

// Unlock releases the lease: it ends the signal first, so that nothing seen
// afterwards loses it, not even the deletion the release itself makes; it
// stops renewing and following the key, after a renewal in flight; then it
// deletes the key if its last revision is still this lease's, so that a
// waiting Lock is woken at once. A key written since by another client is
// left alone. ctx bounds the release; a ctx that has ended already still
// sends it, detached, for at most [ReleaseTimeout]. A lease lost before
// Unlock stays lost, and its key is deleted all the same if it is still
// this lease's.
//
// Unlock returns the error the server gave to the deletion, if any: the key
// then stays until it expires. Successive calls return the first call's
// result.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("natslease: Unlock called with a nil context")
	}
	l.once.Do(func() {
		defer l.releasedEvent()
		ctx, cancel := releaseContext(ctx)
		defer cancel()
		l.ctrl.End()
		l.released.Store(true)
		l.deadline.stop()
		l.sess.forget(l)
		l.rmu.Lock() // a renewal in flight ends first
		rev := l.rev.Load()
		l.rmu.Unlock()
		s := l.sess
		err := s.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
		if wrongLastSequence(err) {
			// A renewal whose answer was lost moved the revision: the
			// key is still this lease's if it holds its value.
			var e jetstream.KeyValueEntry
			if e, err = s.kv.Get(ctx, l.key); err == nil {
				if bytes.Equal(e.Value(), l.value) {
					err = s.kv.Delete(ctx, l.key, jetstream.LastRevision(e.Revision()))
				}
			} else {
				err = nil // deleted or expired since: nothing to release
			}
		}
		l.leaveSession()
		if err != nil {
			l.err = fmt.Errorf("natslease: unlock %q: %w", l.key, err)
		}
	})
	return l.err
}

// lose loses the lease with cause, pushed by the watcher, unless it was
// released, and stops renewing and following it.
func (l *Lease) lose(cause error) { l.loseVia(health.Push, cause) }

// loseAtDeadline is lose for the deadline's timer.
func (l *Lease) loseAtDeadline(cause error) { l.loseVia(health.Deadline, cause) }

// loseAnswer is lose for a cause a renewal's answer showed.
func (l *Lease) loseAnswer(cause error) { l.loseVia(health.Answer, cause) }

// loseVia loses the lease with cause, learned via, stops renewing and
// following it, and then reports the loss to the observer.
func (l *Lease) loseVia(via health.Via, cause error) {
	won := l.ctrl.Lose(cause)
	l.deadline.stop()
	l.sess.forget(l)
	if won {
		l.lost(via)
	}
}

// seen records that the key holds this lease's value at revision rev.
func (l *Lease) seen(rev uint64) {
	for {
		old := l.rev.Load()
		if rev <= old || l.rev.CompareAndSwap(old, rev) {
			return
		}
	}
}

// leaveSession gives back the lease's count in its session, once.
func (l *Lease) leaveSession() { l.leave.Do(l.sess.leave) }
