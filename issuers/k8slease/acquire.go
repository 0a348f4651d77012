package k8slease

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/zukhruf/lease"
)

// acquire waits until identity holds the Lease, and returns the Lease as
// the write that gave it left it, and the send time of that write. A Lock
// cut by ctx returns an error that wraps ctx.Err() and the last failure, if
// any.
//
// With try, it does not wait for a holder: the first round that finds the
// Lease held returns an error wrapping [lease.ErrHeld]. try is what the
// caller observed of the record before, and is left holding what this
// acquire observed, so that a later try counts the same version's age from
// its first sight, as a waiting Lock does; a failure that may heal, or a
// conflict with another write, still takes another round, as in a Lock.
func (c Config) acquire(ctx context.Context, leases coordinationclient.LeaseInterface, b *sub, sh *share, name, identity string, try *observation) (*coordinationv1.Lease, time.Time, error) {
	a := &acquirer{c: c, leases: leases, sub: b, share: sh, name: name, identity: identity}
	if try != nil {
		a.try = true
		a.observed, a.observedAt = try.version, try.at
		defer func() { *try = observation{a.observed, a.observedAt} }()
	}
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		got, pause, err := a.round(ctx)
		switch {
		case err != nil:
			return nil, time.Time{}, err
		case got != nil:
			return got, a.sent, nil
		case a.try && a.held != nil:
			return nil, time.Time{}, fmt.Errorf("%w: the Lease records %s", lease.ErrHeld, describe(a.held))
		case ctx.Err() != nil:
			return nil, time.Time{}, a.cut(ctx)
		}
		wait.Reset(pause)
		select {
		case <-ctx.Done():
			return nil, time.Time{}, a.cut(ctx)
		case <-wait.C:
		case <-a.sub.wake:
			wait.Stop()
		}
	}
}

// observation is a version of a Lease's record and when a candidate first
// saw it.
type observation struct {
	version string
	at      time.Time
}

// acquirer is the state of one acquire.
type acquirer struct {
	c              Config
	leases         coordinationclient.LeaseInterface
	name, identity string

	observed   string    // the resourceVersion of the record last observed
	observedAt time.Time // when it was first seen
	sent       time.Time // the send time of the last write that tried to take the Lease

	try  bool                  // a TryLock: no waiting for a holder
	held *coordinationv1.Lease // the record of the last round, if it found the Lease held

	sub   *sub   // the session's watch: its events of this Lease wake the candidate
	share *share // paces the requests, after the renewals of the held leases

	failures backoff // after a request failed
	last     error   // the last failure, for the error of a Lock cut by its context
	answered bool    // the apiserver answered a request of this Lock
}

// round reads the Lease and tries once to take it. It returns the Lease if
// this candidate took it; an error if no retry can take it; otherwise how
// long to wait, unless the watch wakes it sooner, before the next round.
func (a *acquirer) round(ctx context.Context) (*coordinationv1.Lease, time.Duration, error) {
	a.held = nil
	// The session's watch is open before the read: no change after the
	// version read is missed, and a candidate that may not watch is
	// refused before it takes a Lease it could not follow.
	if err := a.sub.established(ctx); err != nil {
		a.note(err)
		if ctx.Err() != nil {
			return nil, 0, nil
		}
		if apierrors.IsNotFound(err) {
			// A watch of leases answers even in a namespace that does
			// not exist: the address serves no leases at all.
			return nil, 0, fmt.Errorf("watch the Lease: %w (the clientset's address serves no coordination.k8s.io/v1 leases: a path in rest.Config.Host, or another server)", err)
		}
		return a.failed(err, "watch the Lease")
	}
	// A version the watch delivered since the last read is as good as a
	// read: every write below is conditional on the version it saw, and a
	// version seen sooner is counted from a later sight, if anything. A
	// waiting candidate costs no request while the holder renews.
	cur, pushed := a.sub.latest()
	if !pushed {
		if a.share.admit(ctx) != nil {
			return nil, 0, nil
		}
		var err error
		start := time.Now()
		cur, err = a.leases.Get(ctx, a.name, metav1.GetOptions{})
		a.paced(ctx, start, err)
		a.note(err)
		switch {
		case ctx.Err() != nil:
			return nil, 0, nil
		case apierrors.IsNotFound(err):
			cur = nil
			a.sub.read(0)
		case err != nil:
			return a.failed(err, "read the Lease")
		default:
			rv, perr := strconv.ParseInt(cur.ResourceVersion, 10, 64)
			if perr != nil {
				rv = 0
			}
			a.sub.read(rv)
		}
	}

	if cur == nil {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: a.name}}
		if a.share.admit(ctx) != nil {
			return nil, 0, nil
		}
		a.sent = time.Now()
		setRecord(l, a.identity, a.c.durationSeconds(), a.sent, a.sent, 0)
		got, err := a.leases.Create(ctx, l, metav1.CreateOptions{})
		a.paced(ctx, a.sent, err)
		a.note(err)
		switch {
		case err == nil:
			return got, 0, nil
		case ctx.Err() != nil:
			a.c.giveUp(a.leases, a.name, a.identity, a.sent)
			return nil, 0, nil
		case apierrors.IsAlreadyExists(err):
			a.healthy()
			return nil, 0, nil // made by someone else meanwhile: read it at once
		case namespaceMissing(err):
			// It may be made a moment later.
			a.last = fmt.Errorf("create the Lease: %w", err)
			return nil, a.failures.pause(), nil
		case apierrors.IsNotFound(err):
			return nil, 0, fmt.Errorf("create the Lease: %w", err)
		}
		return a.failed(err, "create the Lease")
	}

	// A write of this candidate's whose answer did not come, but which
	// the apiserver applied, gave it the Lease.
	if !a.sent.IsZero() && holder(cur) == a.identity && acquiredAt(cur, a.sent) && renewedAt(cur, a.sent) {
		return cur, 0, nil
	}
	if cur.ResourceVersion != a.observed {
		a.observed, a.observedAt = cur.ResourceVersion, time.Now()
	}
	expires := a.observedAt.Add(durationOf(cur))
	if holder(cur) != "" && time.Now().Before(expires) {
		a.healthy()
		a.held = cur
		return nil, min(a.c.RetryPeriod, time.Until(expires)), nil
	}
	if a.share.admit(ctx) != nil {
		return nil, 0, nil
	}
	a.sent = time.Now()
	upd := cur.DeepCopy()
	setRecord(upd, a.identity, a.c.durationSeconds(), a.sent, a.sent, transitionsOf(cur)+1)
	got, err := a.leases.Update(ctx, upd, metav1.UpdateOptions{})
	a.paced(ctx, a.sent, err)
	a.note(err)
	switch {
	case err == nil:
		return got, 0, nil
	case ctx.Err() != nil:
		a.c.giveUp(a.leases, a.name, a.identity, a.sent)
		return nil, 0, nil
	case apierrors.IsConflict(err):
		a.healthy()
		return nil, 0, nil // someone wrote first: read again at once
	}
	return a.failed(err, "take the Lease over")
}

// failed returns the error of a Lock that step's failure err ends, or, if a
// retry may succeed, the pause before it.
func (a *acquirer) failed(err error, step string) (*coordinationv1.Lease, time.Duration, error) {
	err = fmt.Errorf("%s: %w", step, err)
	if permanent(err, a.answered) {
		return nil, 0, explain(err)
	}
	a.last = err
	return nil, a.failures.pause(), nil
}

// healthy records a round that the apiserver answered as it answers any
// waiting candidate: the failures before it are over, and no longer the
// cause a Lock cut by its context reports.
func (a *acquirer) healthy() {
	a.failures.reset()
	a.last = nil
}

// namespaceMissing reports whether err is the apiserver's 404 for a
// namespace that does not exist.
func namespaceMissing(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// paced tells the pace of acquires how a request sent at start went: slow
// if it took more than half of what a renewal of this lease may take.
func (a *acquirer) paced(ctx context.Context, start time.Time, err error) {
	if ctx.Err() != nil {
		return // cut by the caller: nothing learned
	}
	a.share.answered(time.Since(start), a.c.roundTrip()/2, overloaded(err))
}

// overloaded reports whether err, a request's failure, may come of the
// apiserver's load: anything but an answer about the Lease or the caller.
func overloaded(err error) bool {
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), permanent(err, true):
		return false
	}
	return true
}

// note records whether err, a request's outcome, is an answer of the
// apiserver's.
func (a *acquirer) note(err error) {
	var st apierrors.APIStatus
	a.answered = a.answered || err == nil || errors.As(err, &st)
}

// cut returns the error of a Lock cut by ctx: ctx.Err(), and the last
// failure if there was one.
func (a *acquirer) cut(ctx context.Context) error {
	if a.last == nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w; the last failure: %w", ctx.Err(), a.last)
}

// permanent reports whether err, the failure of a request of a Lock, is one
// that no retry mends: a refusal of the apiserver's (401, 403, 400, 413,
// 422, ...), a certificate that does not verify, or, if the apiserver never
// answered this Lock, an address where nothing listens or a host name that
// does not resolve. Anything else (a namespace not there yet, a 5xx, a 429,
// a timeout, a reset, an apiserver gone after it answered) may heal.
func permanent(err error, answered bool) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		dns       *net.DNSError
	)
	switch {
	case apierrors.IsUnauthorized(err), apierrors.IsRequestEntityTooLargeError(err),
		apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err):
		return true
	case refused(err):
		return true
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return true
	case answered:
		return false
	case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &dns) && dns.IsNotFound:
		return true
	}
	return false
}

// explain adds to a permanent failure what the caller may have got wrong.
func explain(err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w (a candidate needs the verbs get, create, update and watch on leases.coordination.k8s.io in its namespace)", err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w (the apiserver does not accept the clientset's credentials)", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w (nothing listens at the clientset's address, and nothing answered this Lock)", err)
	}
	return err
}

// backoff spaces retries: pauses that double from backoffMin to max, or to
// backoffMax if max is zero. The zero backoff starts at backoffMin.
type backoff struct{ next, max time.Duration }

const (
	backoffMin = 100 * time.Millisecond
	// backoffMax keeps a candidate that fails, or a watch refused, at
	// most one round a 2 s: a read and a create, or one watch.
	backoffMax = 2 * time.Second
)

// pause returns the next pause.
func (b *backoff) pause() time.Duration {
	d := max(b.next, backoffMin)
	limit := b.max
	if limit == 0 {
		limit = backoffMax
	}
	b.next = min(2*d, limit)
	return min(d, limit)
}

// reset starts b again from backoffMin.
func (b *backoff) reset() { b.next = 0 }

// giveUpTimeout bounds the release of a Lease that a Lock cut by its
// context may have taken.
const giveUpTimeout = 5 * time.Second

// giveUp releases the Lease if a write sent at sent, whose answer did not
// come or came too late, gave it to identity.
func (c Config) giveUp(leases coordinationclient.LeaseInterface, name, identity string, sent time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), min(giveUpTimeout, c.LeaseDuration))
	defer cancel()
	release(ctx, leases, name, identity, sent, nil) //nolint:errcheck // the Lease expires if this fails
}

// release writes the record free if it still names identity as acquired at
// acquired, and reports whether it did. known, if not nil, is the record as
// the holder last saw it: the first write carries its resourceVersion
// without a read, which saves the hand-over a round trip; a conflict (the
// record changed since) falls back to reading it.
func release(ctx context.Context, leases coordinationclient.LeaseInterface, name, identity string, acquired time.Time, known *coordinationv1.Lease) (bool, error) {
	for {
		cur, err := known, error(nil)
		known = nil
		if cur == nil {
			cur, err = leases.Get(ctx, name, metav1.GetOptions{})
		}
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, err
		case holder(cur) != identity || !acquiredAt(cur, acquired):
			return false, nil
		}
		now := time.Now()
		upd := cur.DeepCopy()
		setRecord(upd, "", 1, now, now, transitionsOf(cur))
		_, err = leases.Update(ctx, upd, metav1.UpdateOptions{})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsConflict(err):
			continue // renewed or taken meanwhile: read again
		default:
			return false, err
		}
	}
}
