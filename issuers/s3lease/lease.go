package s3lease

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/signal"
)

// Lease is a claim on an S3 lock object, and the lease that tells its
// holder when the claim is gone.
//
// A Lease is made by [Lock] or [Config.Lock]; there is no useful zero
// value. Its methods are safe for concurrent use. The session of its client
// renews it until the loss or the release, whichever comes first.
type Lease struct {
	ctrl    *controller.Controller
	client  *minio.Client
	sess    *session
	cfg     Config
	subject string
	bucket  string
	key     string
	id      string // the lease's random id, in each record it writes
	token   int64  // the epoch

	// next and index are the session's, guarded by its mutex.
	next  time.Time
	index int

	// writing is held (a send) by whoever writes the object: a renewal or
	// the release, through their PUT, so the release follows the renewal
	// in flight; a release whose ctx ends first gives up. It guards etag
	// and seq.
	writing chan struct{}
	etag    string
	seq     int64

	ended    atomic.Bool // lost or released: no more renewals
	deadline deadline

	once sync.Once
	err  error // the release's outcome

	watch    health.Watch // warns an observer as the deadline nears unrenewed
	obsMu    sync.Mutex   // orders the renewals' events before the loss's or the release's
	reported bool         // the Lost or Released event was sent: nothing follows it; guarded by obsMu
}

// Signal returns the holder's view of the lease. Successive calls return
// the same *signal.Signal.
func (l *Lease) Signal() *signal.Signal { return l.ctrl.Signal() }

// Token returns the lease's fencing token: the epoch of its lock object.
// A grant that takes over an object, released or expired, writes its epoch
// plus one, conditional on the ETag it read (If-Match), so of two writers
// only one gets an epoch, and every later holder a larger one. A grant
// that creates the object (none there, If-None-Match: *) writes the
// writer's clock in microseconds: after an operator deleted the object,
// tokens go on above the earlier ones as long as the writer's clock is not
// behind the earlier writers' by more than the time since their grants.
func (l *Lease) Token() int64 { return l.token }

// Deadline returns the time the lease is lost unless a renewal is
// confirmed first: the send time of the last confirmed write plus the TTL,
// less the ClockSkew and the Margin.
func (l *Lease) Deadline() time.Time { return l.deadline.current() }

// Unlock releases the lease: it ends the signal first, so that nothing
// seen afterwards loses it; it stops renewing; then it writes the lock
// object as released (If-Match on the last ETag, keeping the epoch, so
// that the next holder's token is larger), which a waiting Lock of any
// client takes at its next read, and one of this client at once. An object
// that another holder or an operator wrote is left alone. ctx bounds the
// release; a ctx that has ended already still sends it, detached, for at
// most [ReleaseTimeout]. A lease lost before Unlock stays lost, and its
// object is released all the same if it is still this lease's.
//
// Unlock returns the store's error for the release, if any: the object is
// then taken over when its expiry passes. Successive calls return the first
// call's result.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("s3lease: Unlock called with a nil context")
	}
	l.once.Do(func() {
		defer l.released()
		ctx, cancel := releaseContext(ctx)
		defer cancel()
		l.ctrl.End()
		l.ended.Store(true)
		l.deadline.stop()
		l.sess.forget(l)
		select {
		case l.writing <- struct{}{}:
			defer func() { <-l.writing }()
		case <-ctx.Done():
			l.err = fmt.Errorf("s3lease: unlock %q: waiting for the renewal in flight: %w", l.subject, ctx.Err())
			return
		}
		l.seq++
		r := record{Holder: l.cfg.Holder, ID: l.id, Epoch: l.token, Seq: l.seq, Expires: l.cfg.now(), TTL: l.cfg.TTL.String(), Released: true}
		body := r.encode()
		opts := putOptions()
		opts.SetMatchETag(l.etag)
		_, err := l.client.PutObject(ctx, l.bucket, l.key, bytes.NewReader(body), int64(len(body)), opts)
		switch code(err) {
		case "", codePrecondition, codeNoSuchKey:
			l.sess.release(l.bucket + "/" + l.key)
		default:
			l.err = fmt.Errorf("s3lease: unlock %q: %w", l.subject, err)
		}
	})
	return l.err
}

// loseVia loses the lease with cause, learned via, unless it was
// released, and stops its renewals; then it reports the loss to the
// observer.
func (l *Lease) loseVia(via health.Via, cause error) {
	won := l.ctrl.Lose(cause)
	l.ended.Store(true)
	l.deadline.stop()
	l.sess.forget(l)
	if won {
		l.lost(via)
	}
}

// loseAnswer loses the lease with a cause that a renewal's answer showed.
func (l *Lease) loseAnswer(cause error) { l.loseVia(health.Answer, cause) }

// loseAtDeadline loses the lease at its deadline: the deadline's timer.
func (l *Lease) loseAtDeadline(cause error) { l.loseVia(health.Deadline, cause) }

// done reports whether the lease was lost or released.
func (l *Lease) done() bool { return l.ended.Load() }
