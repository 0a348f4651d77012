package etcdlease

import (
	"context"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// StartAt makes the lease of the claim that session s holds with key,
// created at revision rev and granted at revision granted, as Lock and
// Campaign do with what etcd's mutex and election report.
func StartAt(s *concurrency.Session, subject, key string, rev, granted int64, release func(context.Context) error) *Lease {
	return start(s, subject, key, rev, granted, release)
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
// that s ended before its watch reports anything.
func SessionEnded(ctx context.Context, s *concurrency.Session) error {
	return new(Lease).sessionEnded(ctx, s)
}
