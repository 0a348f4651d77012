package etcdlease

import (
	"context"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/health"
)

// StartAt makes the lease of the claim that session s holds with key,
// created at revision rev and granted at revision granted, as Lock and
// Campaign do with what etcd's mutex and election report.
// Like Lock, it waits for etcd to confirm a renewal first.
func StartAt(ctx context.Context, s *concurrency.Session, subject, key string, rev, granted int64, release func(context.Context) error) (*Lease, error) {
	sh, err := acquire(ctx, s, nil)
	if err != nil {
		return nil, err
	}
	return start(sh, subject, key, rev, granted, release, nil, observed{}), nil
}

// Following returns a channel that is closed once l no longer follows its
// claim: it left its session's shared watch and renewals.
func Following(l *Lease) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		for !l.off.Load() {
			time.Sleep(time.Millisecond)
		}
		close(c)
	}()
	return c
}

// SessionEnded returns the cause a lease of session s reports when it learns
// that s ended before its watch reports anything, once it has sent a renewal
// of the session's etcd lease after the end (if its client is open) and had
// its answer.
func SessionEnded(ctx context.Context, s *concurrency.Session) (error, error) {
	var r *renewer
	if s.Client().Ctx().Err() == nil {
		var err error
		r, err = startRenewing(ctx, s, nil, false)
		if err != nil {
			return nil, err
		}
		defer r.close()
	}
	return sessionEnded(s, r), nil
}

// RenewedAt returns the send time of the last renewal of l's session etcd
// confirmed to l.
func RenewedAt(l *Lease) time.Time {
	l.renew.mu.Lock()
	defer l.renew.mu.Unlock()
	return l.renew.sent
}

// RiskArmed reports whether the renewer of l's session armed its risk
// timer for the deadline in force, and whether it ever made one.
func RiskArmed(l *Lease) (armed, made bool) {
	l.renew.mu.Lock()
	defer l.renew.mu.Unlock()
	return l.renew.riskFor.Equal(l.renew.deadline), l.renew.risk != nil
}

// RiskEnded reports whether the renewer of l's session stopped renewing,
// and whether its risk timer was still pending then, which it stops.
func RiskEnded(l *Lease) (ended, pending bool) {
	l.renew.mu.Lock()
	defer l.renew.mu.Unlock()
	if !l.renew.ended {
		return false, false
	}
	return true, l.renew.risk != nil && l.renew.risk.Stop()
}

// StartObserved makes, as StartAt does, a lease on the shared of session s
// that o observes, with a release that does nothing.
func StartObserved(ctx context.Context, s *concurrency.Session, subject string, o health.Observer) (*Lease, error) {
	begun := time.Now()
	sh, err := acquire(ctx, s, nil)
	if err != nil {
		return nil, err
	}
	nop := func(context.Context) error { return nil }
	return start(sh, subject, subject+"/observed", 1, 1, nop, nil, observed{o: o, begun: begun}), nil
}

// WarnAtDeadline runs the risk timer's func of l's session as if it fired
// at the deadline in force plus after, and returns that deadline.
func WarnAtDeadline(l *Lease, after time.Duration) time.Time {
	l.renew.mu.Lock()
	d := l.renew.deadline
	l.renew.mu.Unlock()
	l.renew.warnAt(d.Add(after))
	return d
}

// WarnAtRisk runs the risk timer's func of l's session as if it fired at
// the risk point of the deadline in force.
func WarnAtRisk(l *Lease) {
	l.renew.mu.Lock()
	at := riskAt(l.renew.sent, l.renew.deadline)
	l.renew.mu.Unlock()
	l.renew.warnAt(at)
}
