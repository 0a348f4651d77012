package pglease

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease"
)

// Locker takes leases on subjects through one client with one Config; it
// implements [lease.TryLocker].
//
// A Locker is made by [NewLocker]; the zero Locker has no pool, and its
// Lock and TryLock panic as [Lock] does with a nil pool. A Locker is
// immutable, and safe for use by many goroutines at once.
type Locker struct {
	pool *pgxpool.Pool
	cfg  Config
}

var (
	_ lease.TryLocker = (*Locker)(nil)
	_ lease.Lease     = (*Lease)(nil)
)

// NewLocker returns a Locker that takes leases out of pool with cfg, as
// cfg.Lock does. It keeps its own copy of cfg; cfg is checked by each Lock,
// which refuses one out of range.
func NewLocker(pool *pgxpool.Pool, cfg Config) *Locker {
	checkPool(pool, "NewLocker")
	cfg.Fence = slices.Clone(cfg.Fence)
	cfg.Secret = slices.Clone(cfg.Secret)
	return &Locker{pool: pool, cfg: cfg}
}

// Lock is [Config.Lock] of the Locker's Config and pool, which returns a
// *[Lease]. It refuses the empty subject at once; every other subject has a
// key ([Config.Key]).
func (l *Locker) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, subject, false)
}

// TryLock takes the lease on subject as Lock does if no session holds its
// lock now, with pg_try_advisory_lock in place of pg_advisory_lock, and
// otherwise returns an error wrapping [lease.ErrHeld] at once, leaving no
// waiter on the server. It also refuses a lock that the server grants while
// another lease of this process still holds it, before that lease has read
// its loss (see Lock's same-process order), without waiting for it. ctx
// bounds the other steps, as it does for Lock.
func (l *Locker) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, subject, true)
}

func (l *Locker) lock(ctx context.Context, subject string, try bool) (lease.Lease, error) {
	call := "Lock"
	if try {
		call = "TryLock"
	}
	if ctx == nil {
		panic("pglease: " + call + " called with a nil context")
	}
	if subject == "" {
		return nil, errors.New("pglease: " + call + ": the empty subject")
	}
	ls, err := l.cfg.lock(ctx, l.pool, subject, try)
	if err != nil {
		return nil, err // not ls: a nil *Lease in the interface is not nil
	}
	return ls, nil
}
