package k8slease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// The push. A lease follows its Lease through its session's watch (see
// session): an event of a version later than the one this holder wrote that
// deletes the Lease, or whose record names another holder, or none, loses
// the lease at once, in the watch's goroutine, with no question to the
// apiserver in between. The end of the watch is not a loss: the apiserver
// ends every watch after a while (--min-request-timeout, 30 to 60 minutes
// by default), and a watch that cannot be opened tells nothing; the deadline
// covers the time the Lease goes unwatched, and the next renewal, a write
// conditional on the version this holder last wrote or read, meets a
// conflict if anything was written since.
//
// A watch that cannot be opened, or ends soon after it was opened, is
// opened again after a pause that doubles from 100 ms to 2 s: a session
// whose watch permission was taken away costs the apiserver one refused
// watch each 2 s, whatever the number of its leases, and each lease learns
// of another holder's record at its next renewal, whose conflict it reads.

// pushed returns the cause of the loss that the event p tells of, or nil if
// the record still stands for this lease.
func (l *Lease) pushed(p pushed) error {
	switch {
	case p.typ == watch.Deleted:
		return fmt.Errorf("%w: %s deleted", ErrDeleted, l.ctrl.Subject())
	case l.notOurs(p.obj):
		return fmt.Errorf("%w: the Lease now records %s", ErrTakenOver, describe(p.obj))
	}
	return nil
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
