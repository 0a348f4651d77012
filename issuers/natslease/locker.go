package natslease

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/zukhruf/lease"
)

// Locker takes leases on subjects through one client connection with one
// Config; it implements [lease.TryLocker]. A subject is the KV key the
// lease holds, and the Subject of the
// [github.com/zukhruf/lease/lost.Error] that tells its holder of a loss.
//
// A Locker is a thin view of [Config.Lock]: its leases share their
// client's session, as Config.Lock's do, and a Locker keeps nothing
// between calls. The zero Locker has no client: its Lock and TryLock
// return an error. A Locker is safe for use by many goroutines at once.
type Locker struct {
	nc  *nats.Conn
	cfg Config
}

var (
	_ lease.TryLocker = (*Locker)(nil)
	_ lease.Lease     = (*Lease)(nil)
)

// NewLocker returns a Locker that takes leases through nc with cfg. nc is
// what [Config.Lock] takes; cfg is checked at each Lock, which refuses an
// invalid one at once.
func NewLocker(nc *nats.Conn, cfg Config) *Locker {
	return &Locker{nc: nc, cfg: cfg}
}

// Lock waits until this caller holds subject, and returns its lease: it is
// [Config.Lock] of the Locker's Config and client. A subject that is not a
// valid KV key is refused at once. On error, the Lease is nil.
func (l *Locker) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, subject, false)
}

// TryLock takes subject if no lease holds it now, as Lock does, and
// otherwise returns an error wrapping [lease.ErrHeld] without waiting for a
// release: it runs the Create of Lock once, which writes nothing when the
// key is another lease's. Like Lock, it retries a failure (no answer, a
// leader election) until ctx ends.
func (l *Locker) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, subject, true)
}

func (l *Locker) lock(ctx context.Context, subject string, try bool) (lease.Lease, error) {
	if ctx == nil {
		if try {
			panic("natslease: TryLock called with a nil context")
		}
		panic("natslease: Lock called with a nil context")
	}
	ls, err := l.cfg.lock(ctx, l.nc, subject, try)
	if err != nil {
		return nil, err // a nil interface, not a nil *Lease
	}
	return ls, nil
}
