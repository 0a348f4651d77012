// Package lease defines Lease and Locker, the one API that every issuer of
// this repository implements: a held lock's signal, fencing token and
// release, and the call that takes one on a subject.
//
// Code written against a Locker runs on any coordinator: etcd, PostgreSQL,
// MySQL, Redis, Kubernetes, or the in-memory Locker of package
// [github.com/zukhruf/lease/leasetest] in a unit test. An issuer's extra
// powers (an election, a deadline, a Config field) stay on its own types.
//
// The holder's side of a lease is its [signal.Signal]: check
// [signal.Signal.Err] before each write, select on [signal.Signal.Done], and
// run each call under [signal.Signal.Context]. A lease warns its holder; it
// does not protect a resource. To protect one, send [Lease.Token] with each
// write and have the resource refuse a token lower than the highest it has
// accepted.
package lease

import (
	"context"
	"errors"

	"github.com/zukhruf/lease/signal"
)

// Lease is a held lock: the holder's signal, its fencing token, its release.
//
// A Lease is safe for use by many goroutines at once.
type Lease interface {
	// Signal returns the holder's signal. It is lost, once, with a
	// *[github.com/zukhruf/lease/lost.Error] naming the subject, when the
	// issuer learns the holder may no longer act, no later than the moment
	// another holder could be granted the subject. Successive calls return
	// the same Signal.
	Signal() *signal.Signal

	// Token returns the lease's fencing token. The tokens of successive
	// holders of one subject strictly increase.
	Token() int64

	// Unlock releases the lease. It ends the signal, which is then never
	// lost, before it frees the subject. Calling Unlock again does nothing
	// and returns the first call's result; it never releases the subject of a
	// later holder.
	Unlock(ctx context.Context) error
}

// Locker takes leases on subjects from one coordinator.
type Locker interface {
	// Lock waits until the subject is free, takes it, and returns the lease.
	// A Lock whose ctx ends while it waits returns an error wrapping ctx's
	// error and leaves nothing held. The empty subject, and a subject the
	// coordinator cannot hold (too long for its keys, not a name it allows),
	// is refused at once with an error that names it.
	Lock(ctx context.Context, subject string) (Lease, error)
}

// TryLocker is a Locker that can also take a subject only if it is free now.
// Every issuer of this repository and leasetest's Memory implement it.
type TryLocker interface {
	Locker

	// TryLock takes the subject if no one holds it now, as Lock does, and
	// otherwise returns an error wrapping [ErrHeld] at once, without
	// waiting for a release. It still waits for the coordinator's answer,
	// until ctx ends.
	TryLock(ctx context.Context, subject string) (Lease, error)
}

// ErrHeld is the error that TryLock wraps when another holder holds the
// subject: errors.Is(err, lease.ErrHeld).
var ErrHeld = errors.New("lease: subject is held")
