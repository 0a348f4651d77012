package s3lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/controller"
)

// Lock waits until this caller holds subject, and returns its lease. The
// signal's subject is subject; the lock object is Bucket/subject, or, with
// an empty Bucket, subject is "bucket/key".
//
// The object is free when it does not exist, when its record says it was
// released, or when this process's clock has passed the expiry its holder
// wrote. Lock creates a missing object with a PutObject conditional on
// If-None-Match: *, and takes over a free one with a PutObject conditional
// on If-Match with the ETag it read: of two Locks that race for one
// object, the store lets one write. While the object is held, Lock reads
// it again after a sleep that starts at a sixteenth of the RetryPeriod and
// doubles up to it, and at once when the holder's expiry passes or a
// lease of the same client on the object is released: S3 pushes nothing.
//
// The first Lock of a client on a bucket probes the store (see
// [ErrUnsafeStore]): about seventy writes of small objects under
// ".s3lease-probe-…" in the bucket, deleted afterwards; a store that fails
// it is refused, by every later Lock of the client too.
//
// client is used as it is: its requests carry the lease's reads and
// writes, and its HTTP transport is shared with the caller's own requests;
// nothing the caller does with client ends a lease, and there is nothing to
// close. The leases of one client share one session: one scheduler that
// renews them all through at most eight goroutines, running only while a
// lease is held (the README's "Many leases, one client").
//
// ctx bounds the wait only. A mistake fails at once: an invalid Config, a
// subject that names no bucket or whose key S3 does not take, a missing
// bucket, refused credentials or permissions (the lease needs GetObject,
// PutObject and, for the probe, DeleteObject). Other failures are retried
// until ctx ends. The lease lasts until it is lost or [Lease.Unlock] is
// called; a grant whose answer came after its deadline gives a lease
// already lost.
func (c Config) Lock(ctx context.Context, client *minio.Client, subject string) (*Lease, error) {
	return c.lock(ctx, "lock", client, subject, false)
}

// grant is what a successful grant wrote.
type grant struct {
	etag  string
	epoch int64
	sent  time.Time
}

// lock is Lock, and TryLock if try.
func (c Config) lock(ctx context.Context, call string, client *minio.Client, subject string, try bool) (*Lease, error) {
	if ctx == nil {
		if try {
			panic("s3lease: TryLock called with a nil context")
		}
		panic("s3lease: Lock called with a nil context")
	}
	fail := func(err error) (*Lease, error) { return nil, fmt.Errorf("s3lease: %s %.80q: %w", call, subject, err) }
	if client == nil {
		return fail(errors.New("nil *minio.Client"))
	}
	c, err := c.withDefaults()
	if err != nil {
		return fail(err)
	}
	bucket, key, err := c.object(subject)
	if err != nil {
		return fail(err)
	}
	begun := time.Now()
	s := sessionOf(client)
	if err := s.probe(ctx, client, bucket); err != nil {
		return fail(err)
	}
	id := newID()
	object := bucket + "/" + key
	backoff := max(c.RetryPeriod/16, 10*time.Millisecond)
	var seen time.Time // the latest expiry of a live record this Lock read
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		released, stop := s.wait(object)
		g, until, err := c.attempt(ctx, client, bucket, key, id, seen)
		if until.After(seen) {
			seen = until
		}
		if g != nil && !time.Now().Before(g.sent.Add(c.life())) {
			// The grant's answer came after its own deadline: a waiter
			// may hold the object already. It is no lease; try again.
			c.abandon(client, bucket, key, id)
			g = nil
		}
		if g != nil {
			stop()
			l := &Lease{
				ctrl: controller.New(subject), client: client, sess: s, cfg: c,
				subject: subject, bucket: bucket, key: key, id: id, token: g.epoch,
				etag: g.etag, seq: 1, index: -1, next: g.sent.Add(c.RenewPeriod),
				writing: make(chan struct{}, 1),
			}
			l.granted(begun, g.sent) // before the deadline's timer can lose it
			l.deadline.start(c.life(), g.sent, l.loseAtDeadline)
			s.hold(l)
			return l, nil
		}
		switch {
		case ctx.Err() != nil:
			stop()
			return fail(ctx.Err())
		case mistake(err):
			stop()
			return fail(err)
		case try && err == nil:
			stop()
			return fail(lease.ErrHeld)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		if !until.IsZero() {
			if d := until.Sub(c.now()) + time.Millisecond; d < sleep {
				sleep = max(d, 0)
			}
		}
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			stop()
			return fail(ctx.Err())
		case <-released:
		case <-timer.C:
		}
		stop()
		backoff = min(2*backoff, max(c.RetryPeriod, 10*time.Millisecond))
	}
}

// attempt reads the lock object and writes it if it is free. It returns
// the grant, or, if the object is held, the time by this process's clock
// at which it may be taken over (zero if another writer won a race), or
// the store's error.
//
// seen is the latest expiry of a live record that this Lock read before:
// until it passes, the object is held whatever it holds now. An operator
// who deletes or overwrites a held object frees it at once only for a
// Lock that never read its record; the holder learns of it at its next
// renewal, and a Lock that was waiting still waits for the expiry it read,
// which comes after the holder's deadline.
func (c Config) attempt(ctx context.Context, client *minio.Client, bucket, key, id string, seen time.Time) (*grant, time.Time, error) {
	o, err := read(ctx, client, bucket, key)
	if err != nil {
		return nil, time.Time{}, err
	}
	now := c.now()
	epoch := now.UnixMicro()
	if now.Before(seen) {
		if o != nil {
			if r, err := decode(o.body); err == nil && r.Released {
				seen = time.Time{} // released by its holder since: free
			}
		}
		if !seen.IsZero() {
			return nil, seen, nil
		}
	}
	if o != nil {
		r, err := decode(o.body)
		expires := o.modified.Add(c.TTL) // an object that is not a record: by its write time
		if err == nil {
			expires = r.Expires
			epoch = r.Epoch + 1
		}
		if !(err == nil && r.Released) && !now.After(expires) {
			return nil, expires, nil
		}
	}
	sent := time.Now()
	r := record{Holder: c.Holder, ID: id, Epoch: epoch, Seq: 1, Expires: c.now().Add(c.TTL), TTL: c.TTL.String()}
	var info minio.UploadInfo
	if o == nil {
		info, err = put(ctx, client, bucket, key, r.encode(), true, "")
	} else {
		info, err = put(ctx, client, bucket, key, r.encode(), false, o.etag)
	}
	switch {
	case err == nil:
		return &grant{etag: info.ETag, epoch: epoch, sent: sent}, time.Time{}, nil
	case refused(err) || code(err) == codeNoSuchKey:
		return nil, time.Time{}, nil // another writer won
	case ctx.Err() != nil:
		// The write may have landed after all: give it back, so that it
		// does not keep the subject for a TTL.
		c.abandon(client, bucket, key, id)
	}
	return nil, time.Time{}, err
}

// abandon releases bucket/key if it holds the record of lease id, whose
// grant's answer was lost: best effort, for a second at most.
func (c Config) abandon(client *minio.Client, bucket, key, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o, err := read(ctx, client, bucket, key)
	if err != nil || o == nil {
		return
	}
	r, err := decode(o.body)
	if err != nil || r.ID != id {
		return
	}
	r.Seq++
	r.Released, r.Expires = true, c.now()
	put(ctx, client, bucket, key, r.encode(), false, o.etag)
}
