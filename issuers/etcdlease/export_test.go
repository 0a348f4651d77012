package etcdlease

import (
	"context"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// StartAt makes the lease of the claim that session s holds with key,
// created at revision rev and granted at revision granted, as Lock and
// Campaign do with what etcd's mutex and election report.
// Like Lock, it waits for etcd to confirm a renewal first.
func StartAt(ctx context.Context, s *concurrency.Session, subject, key string, rev, granted int64, release func(context.Context) error) (*Lease, error) {
	r, err := startRenewing(ctx, s, nil, true)
	if err != nil {
		return nil, err
	}
	return start(r, s, subject, key, rev, granted, release, nil), nil
}

// Following returns a channel that is closed once the goroutines that
// follow l's claim have returned.
func Following(l *Lease) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		l.watchers.Wait()
		close(c)
	}()
	return c
}

// SessionEnded returns the cause a lease of session s reports when it learns
// that s ended before its watch reports anything, once it has sent a renewal
// of the session's etcd lease after the end (if its client is open) and had
// its answer.
func SessionEnded(ctx context.Context, s *concurrency.Session) (error, error) {
	l := new(Lease)
	if s.Client().Ctx().Err() == nil {
		r, err := startRenewing(ctx, s, nil, false)
		if err != nil {
			return nil, err
		}
		defer r.close()
		l.renew = r
	}
	return l.sessionEnded(s), nil
}

// RenewedAt returns the send time of the last renewal of l's session etcd
// confirmed to l.
func RenewedAt(l *Lease) time.Time {
	l.renew.mu.Lock()
	defer l.renew.mu.Unlock()
	return l.renew.sent
}
