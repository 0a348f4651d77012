package s3lease

import (
	"context"
	"errors"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease"
)

// Locker takes leases on subjects through one client with one Config; it
// implements [lease.TryLocker]. A subject is the lock object's key in
// Config.Bucket (or "bucket/key" when Bucket is empty), and the Subject of
// the [github.com/zukhruf/lease/lost.Error] that tells its holder of a
// loss.
//
// A Locker is a thin view of [Config.Lock]: its leases share their
// client's session, as Config.Lock's do, and a Locker keeps nothing
// between calls. The zero Locker has no client: its Lock and TryLock
// return an error. A Locker is safe for use by many goroutines at once.
type Locker struct {
	client *minio.Client
	cfg    Config
}

var (
	_ lease.TryLocker = (*Locker)(nil)
	_ lease.Lease     = (*Lease)(nil)
)

// NewLocker returns a Locker that takes leases through client with cfg.
// cfg is checked at each Lock, which refuses an invalid one at once.
func NewLocker(client *minio.Client, cfg Config) *Locker {
	return &Locker{client: client, cfg: cfg}
}

// Lock waits until this caller holds subject, and returns its lease: it is
// [Config.Lock] of the Locker's Config and client. On error, the Lease is
// nil.
func (l *Locker) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, "Lock", subject, false)
}

// TryLock takes subject if no lease holds it now, as Lock does, and
// otherwise returns an error wrapping [lease.ErrHeld] without waiting: the
// object is live by this process's clock, or another Lock's conditional
// write won the race. Like Lock, it retries a failure of the store until
// ctx ends.
func (l *Locker) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, "TryLock", subject, true)
}

func (l *Locker) lock(ctx context.Context, call, subject string, try bool) (lease.Lease, error) {
	if ctx == nil {
		panic("s3lease: " + call + " called with a nil context")
	}
	if subject == "" {
		return nil, errors.New("s3lease: " + call + ": the empty subject")
	}
	name := "lock"
	if try {
		name = "trylock"
	}
	ls, err := l.cfg.lock(ctx, name, l.client, subject, try)
	if err != nil {
		return nil, err // a nil interface, not a nil *Lease
	}
	return ls, nil
}

// TryLock takes subject if no lease holds it now, with c, as
// [Locker.TryLock] does.
func (c Config) TryLock(ctx context.Context, client *minio.Client, subject string) (*Lease, error) {
	return c.lock(ctx, "trylock", client, subject, true)
}
