package promhealth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/health/promhealth"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// feed tells o the life of two leases: one renewed twice (once thin) and
// released, one whose renewal failed and that was lost.
func feed(o health.Observer) {
	e := health.Event{Issuer: "redislease", Subject: "orders", Token: 1, Wait: 3 * time.Millisecond}
	health.NotifyGranted(o, e)
	e.Sent, e.Deadline = t0, t0.Add(9*time.Second)
	health.NotifyRenewed(o, e, t0.Add(time.Millisecond))
	health.NotifyRenewed(o, e, t0.Add(7*time.Second))
	health.NotifyReleased(o, e)

	c := controller.New("invoices")
	c.Lose(errors.New("redislease: key deleted"))
	f := health.Event{Issuer: "redislease", Subject: "invoices", Token: 2}
	health.NotifyGranted(o, f)
	f.Deadline, f.Err = t0.Add(time.Second), errors.New("i/o timeout")
	health.NotifyFailed(o, f, t0)
	f.Err, f.Via = c.Signal().Err(), health.Push
	health.NotifyLost(o, f)
}

func TestMetrics(t *testing.T) {
	o := promhealth.New(promhealth.Options{})
	feed(o)
	want := `
# HELP lease_held Leases held now.
# TYPE lease_held gauge
lease_held{issuer="redislease"} 0
# HELP lease_transitions_total Leases granted.
# TYPE lease_transitions_total counter
lease_transitions_total{issuer="redislease"} 2
# HELP lease_renewal_failures_total Renewals that failed and were tried again.
# TYPE lease_renewal_failures_total counter
lease_renewal_failures_total{issuer="redislease"} 1
# HELP lease_at_risk_total Renewals that failed or confirmed with a thin margin.
# TYPE lease_at_risk_total counter
lease_at_risk_total{issuer="redislease"} 2
# HELP lease_losses_total Leases lost, by cause and by how the loss was learned.
# TYPE lease_losses_total counter
lease_losses_total{cause="key deleted",issuer="redislease",via="push"} 1
`
	if err := testutil.CollectAndCompare(o, strings.NewReader(want), "lease_held", "lease_transitions_total",
		"lease_renewal_failures_total", "lease_at_risk_total", "lease_losses_total"); err != nil {
		t.Error(err)
	}
	for name, n := range map[string]int{"lease_acquire_wait_seconds": 1, "lease_renewal_seconds": 1, "lease_margin_seconds": 1} {
		if got := testutil.CollectAndCount(o, name); got != n {
			t.Errorf("%s: %d series, want %d", name, got, n)
		}
	}
}

func TestSubjectLabel(t *testing.T) {
	o := promhealth.New(promhealth.Options{Subject: true})
	feed(o)
	if got := testutil.CollectAndCount(o, "lease_transitions_total"); got != 2 {
		t.Errorf("lease_transitions_total with subjects: %d series, want 2", got)
	}
	if got := testutil.CollectAndCount(promhealth.New(promhealth.Options{}), "lease_transitions_total"); got != 0 {
		t.Errorf("a new Observer has %d series, want 0", got)
	}
}

// TestLint checks the names, help and types against Prometheus's
// conventions with promlint.
func TestLint(t *testing.T) {
	o := promhealth.New(promhealth.Options{Subject: true})
	feed(o)
	problems, err := testutil.CollectAndLint(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestRegister(t *testing.T) {
	if err := prometheus.NewRegistry().Register(promhealth.New(promhealth.Options{})); err != nil {
		t.Fatal(err)
	}
}
