package k8slease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// renewRetryMax bounds the pause before a failed renewal is sent again:
// the pause doubles from 100 ms, so that a single failure costs 100 ms and
// an apiserver that refuses every request (429, 5xx, 401 while a token
// rotates) gets at most one renewal a second from each lease, the rate at
// which a renewal can move the deadline, but for the few tries that
// retryBefore packs into the last second before the deadline.
const renewRetryMax = time.Second

// renewOnce sends one renewal of the record, and returns when the next one
// is due, or false if the lease sends no more: its renewals were stopped, or
// the renewal lost it. Its session's scheduler calls it when the renewal is
// due, never twice at once for one lease.
//
// Renewals are sent one at a time, each an Update carrying the
// resourceVersion of the last version this holder wrote or read. A renewal
// whose answer did not come may still have been applied; the next one then
// meets a conflict, and the read that follows shows whether the record is
// still this holder's, and which of its renewals it holds: a renewal found
// there is confirmed by that read.
func (l *Lease) renewOnce() (time.Time, bool) {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	ctx := l.rctx
	if ctx.Err() != nil {
		return time.Time{}, false
	}
	// A request is abandoned at the deadline: its answer could no longer
	// move it.
	rctx, cancel := context.WithDeadline(ctx, l.deadline.current())
	sent := time.Now() // before the send: never later than the apiserver's receipt
	got, err := l.leases.Update(rctx, l.record(l.cur, sent), metav1.UpdateOptions{})
	applied := err == nil
	if err != nil && apierrors.IsConflict(err) {
		// sent was not applied; one of the renewals before it may have been.
		got, err = l.reread(rctx, l.unanswered)
	}
	cancel()
	switch {
	case ctx.Err() != nil:
		return time.Time{}, false
	case err == nil:
		l.cur, l.unanswered = slim(got), l.unanswered[:0]
		l.retries.reset()
		if !applied {
			return time.Now(), true // again at once, on the version just read
		}
		l.deadline.confirm(sent)
		return nextRenewal(sent, l.cfg.RenewPeriod), true
	case isGone(err):
		return time.Time{}, false // reread lost the lease
	}
	l.unanswered = append(l.unanswered, sent)
	if apierrors.IsNotFound(err) {
		l.loseAnswer(fmt.Errorf("%w: %s not found by the renewal sent at %s", ErrDeleted, l.ctrl.Subject(), clock(sent)))
		return time.Time{}, false
	}
	if refused(err) {
		l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s: %w", ErrRefused, clock(sent), err))
		return time.Time{}, false
	}
	l.renewalFailed(sent, err)
	return time.Now().Add(retryBefore(&l.retries, time.Until(l.deadline.current()))), true
}

// retryFloor is the shortest pause retryBefore gives.
const retryFloor = 25 * time.Millisecond

// retryBefore returns the pause before a failed renewal is sent again: the
// backoff's, but at most renewRetryMax, whatever b's own ceiling (a lease's
// backoff is its zero value), and at most half the time left before the
// deadline (and no less than retryFloor), so that a lease of 2 s whose
// renewals failed in a blip still tries a few times while a confirmation
// can move its deadline, not once 95 ms before it.
func retryBefore(b *backoff, left time.Duration) time.Duration {
	return min(b.pause(), renewRetryMax, max(left/2, retryFloor))
}

// errGone reports that reread lost the lease.
var errGone = fmt.Errorf("k8slease: lost")

func isGone(err error) bool { return err == errGone }

// reread reads the Lease after a renewal met a conflict: someone else wrote
// it, or a renewal in sent, whose answer did not come, was applied. It loses
// the lease if the record names another holder or the Lease is gone, and
// otherwise returns the Lease read, after confirming the renewal of sent it
// holds, if any.
func (l *Lease) reread(ctx context.Context, sent []time.Time) (*coordinationv1.Lease, error) {
	got, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		l.loseAnswer(fmt.Errorf("%w: a renewal met a conflict, and the read that followed found no Lease", ErrDeleted))
		return nil, errGone
	case err != nil:
		return nil, err
	case l.notOurs(got):
		l.loseAnswer(fmt.Errorf("%w: a renewal met a conflict, and the read that followed found %s", ErrTakenOver, describe(got)))
		return nil, errGone
	}
	for _, s := range sent {
		if renewedAt(got, s) {
			l.deadline.confirm(s)
		}
	}
	return got, nil
}

// refused reports whether err is a refusal that no retry mends.
func refused(err error) bool {
	// 401 is left to the deadline: a token being rotated answers it for a
	// while.
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// slim drops the record's managedFields, which a held lease keeps for
// every renewal and needs for none: an Update that carries none leaves the
// apiserver's as they are.
func slim(l *coordinationv1.Lease) *coordinationv1.Lease {
	l.ManagedFields = nil
	return l
}
