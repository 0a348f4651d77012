package k8slease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// follow watches the Lease from resourceVersion rv until ctx ends or the
// lease is lost, and loses it at once when the record names another holder,
// or none, or the Lease is deleted. The end of a watch is not a loss: the
// apiserver ends every watch after a while (--min-request-timeout, 30 to 60
// minutes by default), and a watch that cannot be opened tells nothing; the
// deadline covers the time the Lease goes unwatched. follow watches again
// from the last version it saw, and reads the Lease first if the apiserver
// no longer has that version (410 Gone).
//
// A watch that cannot be opened, or ends soon after it was opened, is
// opened again after a pause that doubles from 100 ms to 2 s: a holder
// whose watch permission was taken away costs the apiserver one refused
// watch each 2 s, and learns of another holder's record at its next
// renewal, whose conflict it reads.
func (l *Lease) follow(ctx context.Context, rv string) {
	var retries backoff
	for ctx.Err() == nil {
		if rv == "" {
			var ok bool
			if rv, ok = l.relist(ctx); !ok {
				return
			}
			if rv == "" {
				pauseFor(ctx, retries.pause())
				continue
			}
		}
		opened := time.Now()
		w, err := l.leases.Watch(ctx, metav1.ListOptions{
			FieldSelector:       fields.OneTermEqualSelector("metadata.name", l.name).String(),
			ResourceVersion:     rv,
			AllowWatchBookmarks: true,
		})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			pauseFor(ctx, retries.pause())
			continue
		}
		var lost bool
		rv, lost = l.drain(ctx, w, rv)
		w.Stop()
		if lost {
			return
		}
		if time.Since(opened) >= backoffMax {
			retries.reset()
		}
		pauseFor(ctx, retries.pause()) // a watch that fails at once must not spin
	}
}

// drain reads the events of w until it ends, and returns the last
// resourceVersion seen ("" if the apiserver no longer has it) and whether
// the lease was lost.
func (l *Lease) drain(ctx context.Context, w watch.Interface, rv string) (string, bool) {
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, true
		case ev, ok = <-w.ResultChan():
			if !ok {
				return rv, false
			}
		}
		switch ev.Type {
		case watch.Error:
			if st := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(st) || apierrors.IsGone(st) {
				return "", false
			}
			return rv, false
		case watch.Deleted:
			l.lose(fmt.Errorf("%w: %s deleted", ErrDeleted, l.ctrl.Subject()))
			return rv, true
		case watch.Added, watch.Modified, watch.Bookmark:
			got, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			rv = got.ResourceVersion
			if ev.Type != watch.Bookmark && l.notOurs(got) {
				l.lose(fmt.Errorf("%w: the Lease now records %s", ErrTakenOver, describe(got)))
				return rv, true
			}
		}
	}
}

// relist reads the Lease to start watching again from its version. It
// returns false if the lease is lost or ctx ended; "" if the read failed.
func (l *Lease) relist(ctx context.Context) (string, bool) {
	got, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
	switch {
	case ctx.Err() != nil:
		return "", false
	case apierrors.IsNotFound(err):
		l.lose(fmt.Errorf("%w: %s not found when the watch was opened again", ErrDeleted, l.ctrl.Subject()))
		return "", false
	case err != nil:
		return "", true
	case l.notOurs(got):
		l.lose(fmt.Errorf("%w: the Lease, read when the watch was opened again, records %s", ErrTakenOver, describe(got)))
		return "", false
	}
	return got.ResourceVersion, true
}

// notOurs reports whether the record no longer stands for this lease: it
// names another holder (another identity, none, or this identity acquired
// at another time), or a shorter lease duration than this holder wrote,
// after which a candidate may take it over before this holder's deadline.
func (l *Lease) notOurs(got *coordinationv1.Lease) bool {
	return holder(got) != l.identity || !acquiredAt(got, l.acquired) || durationOf(got) < l.cfg.LeaseDuration
}

// pauseFor waits d or until ctx ends.
func pauseFor(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
