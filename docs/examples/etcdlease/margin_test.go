package etcdlease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/docs/examples/etcdlease"
)

func TestWithMarginNegativePanics(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "etcdlease: WithMargin") {
			t.Errorf("recover() = %v, want a panic naming etcdlease: WithMargin", r)
		}
	}()
	etcdlease.WithMargin(-time.Millisecond)
}

// A margin of half the TTL or more leaves the renewals no time to be
// confirmed: Lock and Campaign refuse it, and leave nothing running.
func TestLockRefusesMarginOfHalfTheTTL(t *testing.T) {
	t.Parallel()
	s := newSession(t, startEtcd(t))
	half := etcdlease.WithMargin(ttl * time.Second / 2)
	if l, err := etcdlease.Lock(t.Context(), s, lockName, half); err == nil || !strings.Contains(err.Error(), "margin") {
		t.Errorf("Lock(..., WithMargin(TTL/2)) = %v, %v; want an error about the margin", l, err)
	}
	if l, err := etcdlease.Campaign(t.Context(), s, electionName, "a", half); err == nil || !strings.Contains(err.Error(), "margin") {
		t.Errorf("Campaign(..., WithMargin(TTL/2)) = %v, %v; want an error about the margin", l, err)
	}
	l := mustLock(t, s, lockName, etcdlease.WithMargin(ttl*time.Second/2-time.Millisecond))
	checkRelease(t, "Unlock", l.Unlock)
}
