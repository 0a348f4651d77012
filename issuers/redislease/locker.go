package redislease

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease"
)

// Locker takes leases on subjects through one client with one Config; it
// implements [lease.TryLocker]. A subject is the Redis key the lease holds,
// and the Subject of the [github.com/zukhruf/lease/lost.Error] that tells
// its holder of a loss.
//
// A Locker is a thin view of [Config.Lock]: its leases share their
// client's session, as Config.Lock's do, and a Locker keeps nothing
// between calls.
// The zero Locker has no client: its Lock and TryLock return an error.
// A Locker is safe for use by many goroutines at once.
type Locker struct {
	rdb redis.UniversalClient
	cfg Config
}

var (
	_ lease.TryLocker = (*Locker)(nil)
	_ lease.Lease     = (*Lease)(nil)
)

// NewLocker returns a Locker that takes leases through rdb with cfg. rdb is
// what [Config.Lock] takes; cfg is checked at each Lock, which refuses an
// invalid one at once.
func NewLocker(rdb redis.UniversalClient, cfg Config) *Locker {
	return &Locker{rdb: rdb, cfg: cfg}
}

// Lock waits until this caller holds subject, and returns its lease: it is
// [Config.Lock] of the Locker's Config and client. The empty subject, and a
// subject that cannot share a Cluster slot with its token counter (a '}'
// without a hash tag), are refused at once. On error, the Lease is nil.
func (l *Locker) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, "Lock", subject, false)
}

// TryLock takes subject if no lease holds it now, as Lock does, and
// otherwise returns an error wrapping [lease.ErrHeld] without waiting for a
// release. It runs the grant script of Lock once: the same atomic claim,
// which writes nothing when the key or its claim is another lease's, so a
// refused TryLock leaves nothing behind. Like Lock, it retries a failure
// (a reconnection, a grant not yet on enough replicas) until ctx ends.
func (l *Locker) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, "TryLock", subject, true)
}

func (l *Locker) lock(ctx context.Context, call, subject string, try bool) (lease.Lease, error) {
	if ctx == nil {
		panic("redislease: " + call + " called with a nil context")
	}
	if subject == "" {
		return nil, errors.New("redislease: " + call + ": the empty subject")
	}
	ls, err := l.cfg.lock(ctx, l.rdb, subject, try)
	if err != nil {
		return nil, err // a nil interface, not a nil *Lease
	}
	return ls, nil
}
