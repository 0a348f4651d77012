package etcdlease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/etcdlease"
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

// A holder whose network goes silent, its connections open, is lost at its
// local deadline with ErrRenewalUnconfirmed, which names the last renewal
// etcd confirmed and the deadline. The margin, just under half the TTL,
// makes the deadline come before etcd's own client gives the session up,
// a TTL after the last answer it received.
func TestLockLostAtLocalDeadline(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	px := startProxy(t, srv.Endpoint())
	s := newSessionOn(t, proxyClient(t, px))
	l := mustLock(t, s, lockName, etcdlease.WithMargin(ttl*time.Second/2-100*time.Millisecond))

	px.Drop(faultnet.Both)
	checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrRenewalUnconfirmed, "(margin 2.4s)")
	px.Heal()
	px.Cut()
	// A read, which etcd's client retries, waits for the reconnection the
	// release needs.
	if _, err := s.Client().Get(t.Context(), l.Key()); err != nil {
		t.Fatalf("Get after healing: %v", err)
	}
	checkRelease(t, "Unlock after the loss", l.Unlock)
}
