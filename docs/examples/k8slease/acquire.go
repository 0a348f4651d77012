package k8slease

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// acquire waits until identity holds the Lease, and returns the Lease as
// the write that gave it left it, and the send time of that write.
func (c Config) acquire(ctx context.Context, leases coordinationclient.LeaseInterface, name, identity string) (*coordinationv1.Lease, time.Time, error) {
	var (
		observed   string    // the resourceVersion of the record last observed
		observedAt time.Time // when it was first seen
		w          watch.Interface
		changes    <-chan watch.Event // w's events: a wake-up, nothing more
	)
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	wait := time.NewTimer(0)
	defer wait.Stop()
	var sent time.Time // the send time of the last write that tried to take the Lease
	for {
		pause := c.RetryPeriod // until the next read, unless something wakes this candidate
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case ctx.Err() != nil:
			return nil, time.Time{}, ctx.Err()
		case apierrors.IsNotFound(err):
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
			sent = time.Now()
			setRecord(l, identity, c.durationSeconds(), sent, sent, 0)
			got, err := leases.Create(ctx, l, metav1.CreateOptions{})
			switch {
			case err == nil:
				return got, sent, nil
			case ctx.Err() != nil:
				c.giveUp(leases, name, identity, sent)
				return nil, time.Time{}, ctx.Err()
			case refused(err):
				return nil, time.Time{}, err
			case apierrors.IsAlreadyExists(err):
				continue // made by someone else meanwhile: read it at once
			}
			cur = nil // a failure, or a namespace not there yet: read again after a pause
		case err != nil:
			if refused(err) {
				return nil, time.Time{}, err
			}
			cur = nil
		}

		if cur != nil {
			// A write of this candidate's whose answer did not come, but
			// which the apiserver applied, gave it the Lease.
			if !sent.IsZero() && holder(cur) == identity && acquiredAt(cur, sent) && renewedAt(cur, sent) {
				return cur, sent, nil
			}
			if cur.ResourceVersion != observed {
				observed, observedAt = cur.ResourceVersion, time.Now()
			}
			expires := observedAt.Add(durationOf(cur))
			if holder(cur) == "" || !time.Now().Before(expires) {
				sent = time.Now()
				upd := cur.DeepCopy()
				setRecord(upd, identity, c.durationSeconds(), sent, sent, transitionsOf(cur)+1)
				got, err := leases.Update(ctx, upd, metav1.UpdateOptions{})
				switch {
				case err == nil:
					return got, sent, nil
				case ctx.Err() != nil:
					c.giveUp(leases, name, identity, sent)
					return nil, time.Time{}, ctx.Err()
				case apierrors.IsConflict(err):
					continue // someone wrote first: read again at once
				case refused(err):
					return nil, time.Time{}, err
				}
				// A failure: read again after the pause.
			} else {
				pause = min(pause, time.Until(expires))
			}
			if w == nil {
				// Watched from the version read, so that no change after
				// it is missed; an error leaves the retry period to wake.
				w, err = leases.Watch(ctx, metav1.ListOptions{
					FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
					ResourceVersion: cur.ResourceVersion,
				})
				if err == nil {
					changes = w.ResultChan()
				} else {
					w = nil
				}
			}
		}
		wait.Reset(pause)
		select {
		case <-ctx.Done():
			return nil, time.Time{}, ctx.Err()
		case <-wait.C:
		case _, ok := <-changes:
			wait.Stop()
			if !ok {
				// Ended by the apiserver: opened again at the next
				// read, after a pause, so that a watch refused at once
				// does not spin.
				w.Stop()
				w, changes = nil, nil
				pauseFor(ctx, min(c.RetryPeriod, retryPause))
			}
		}
	}
}

// giveUpTimeout bounds the release of a Lease that a Lock cut by its
// context may have taken.
const giveUpTimeout = 5 * time.Second

// giveUp releases the Lease if a write sent at sent, whose answer did not
// come or came too late, gave it to identity.
func (c Config) giveUp(leases coordinationclient.LeaseInterface, name, identity string, sent time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), min(giveUpTimeout, c.LeaseDuration))
	defer cancel()
	release(ctx, leases, name, identity, sent) //nolint:errcheck // the Lease expires if this fails
}

// release writes the record free if it still names identity as acquired at
// acquired, and reports whether it did.
func release(ctx context.Context, leases coordinationclient.LeaseInterface, name, identity string, acquired time.Time) (bool, error) {
	for {
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
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
