package mysqllease

import (
	"bytes"
	"context"
	"database/sql"

	"github.com/zukhruf/lease"
)

// Locker takes leases on subjects through one client with one Config; it
// implements lease.TryLocker. Its leases share the sessions of the
// Locker's *sql.DB as [Config.Lock]'s do.
//
// The zero Locker has no *sql.DB: its methods panic. Make one with
// [NewLocker]. A Locker is immutable: it is safe for use by many goroutines
// at once, and may be copied.
type Locker struct {
	db  *sql.DB
	cfg Config
}

var (
	_ lease.TryLocker = (*Locker)(nil)
	_ lease.Lease     = (*Lease)(nil)
)

// NewLocker returns a Locker that takes leases from db with cfg. It keeps a
// copy of cfg (and of cfg.Secret); cfg is checked by each Lock, which
// refuses one out of range. NewLocker panics if db is nil.
func NewLocker(db *sql.DB, cfg Config) *Locker {
	if db == nil {
		panic("mysqllease: NewLocker called with a nil *sql.DB")
	}
	cfg.Secret = bytes.Clone(cfg.Secret)
	return &Locker{db: db, cfg: cfg}
}

// Lock waits until a session of the issuer holds the lock of subject and
// returns the lease, a *[Lease]: it is [Config.Lock] with the Locker's db
// and Config. On an error, the Lease is a nil interface.
func (l *Locker) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	ls, err := l.config().Lock(ctx, l.db, subject)
	if err != nil {
		return nil, err
	}
	return ls, nil
}

// TryLock takes the lock of subject if it is free now, as Lock does, and
// otherwise returns an error wrapping [lease.ErrHeld] at once: it runs
// GET_LOCK(name, 0) on a shared session, as Lock does first, which neither
// waits nor leaves the session queued for the lock. A lease of this process on
// the same lock refuses it too, even after the server freed that lease's
// lock, until the lease is lost or released. ctx bounds the statements, as
// it bounds Lock's.
//
// [ErrHeld] of this package, a session of db's pool that already holds the
// lock, is a mistake Lock refuses too: TryLock returns it without
// [lease.ErrHeld], since retrying cannot succeed.
func (l *Locker) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	ls, err := l.config().acquire(ctx, l.db, subject, "TryLock", true)
	if err != nil {
		return nil, err
	}
	return ls, nil
}

func (l *Locker) config() Config {
	if l.db == nil {
		panic("mysqllease: a Locker not made by NewLocker")
	}
	return l.cfg
}
