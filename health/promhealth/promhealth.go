// Package promhealth counts the events of leases in Prometheus metrics: an
// [Observer] is a [health.Observer] to set on an issuer's Config (or
// etcdlease.WithObserver) and a [prometheus.Collector] to register.
//
// The metrics, each labelled with the issuer ("redislease", …), and with the
// subject too where [Options.Subject] asks (off by default: one series per
// subject, whose count the caller must bound):
//
//   - lease_held: the leases held now (gauge)
//   - lease_transitions_total: the leases granted (counter)
//   - lease_acquire_wait_seconds: how long each Lock waited (histogram)
//   - lease_renewal_seconds: the round trip of each confirmed renewal (histogram)
//   - lease_margin_seconds: the margin left at each confirmed renewal (histogram)
//   - lease_renewal_failures_total: renewals that failed, and were tried again (counter)
//   - lease_at_risk_total: renewals that failed or left a thin margin (counter)
//   - lease_losses_total: losses, also labelled by cause ([health.Cause]) and via (counter)
//
// The names follow Prometheus's conventions (base units, _total on
// counters), checked by promlint (TestLint).
package promhealth

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/zukhruf/lease/health"
)

// Options sets what an Observer labels.
type Options struct {
	// Subject adds a subject label to the metrics that are counted per
	// lease (lease_held, lease_transitions_total,
	// lease_renewal_failures_total, lease_at_risk_total,
	// lease_losses_total). Each subject is then a series of its own: set
	// it only where the subjects are few.
	Subject bool
}

// Observer counts the events it observes. Make one with [New]; it is safe
// for use by many goroutines at once.
type Observer struct {
	subject bool

	held        *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	wait        *prometheus.HistogramVec
	renewal     *prometheus.HistogramVec
	margin      *prometheus.HistogramVec
	failures    *prometheus.CounterVec
	risks       *prometheus.CounterVec
	losses      *prometheus.CounterVec
}

var (
	_ health.Observer      = (*Observer)(nil)
	_ prometheus.Collector = (*Observer)(nil)
)

// durations are the buckets of the histograms, in seconds: from a
// millisecond to a minute.
var durations = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New returns an Observer with no series yet; register it with a
// prometheus.Registerer.
func New(o Options) *Observer {
	per := []string{"issuer"}
	if o.Subject {
		per = append(per, "subject")
	}
	return &Observer{
		subject: o.Subject,
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lease_held", Help: "Leases held now.",
		}, per),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lease_transitions_total", Help: "Leases granted.",
		}, per),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lease_acquire_wait_seconds", Help: "Time a Lock waited for its grant.", Buckets: durations,
		}, []string{"issuer"}),
		renewal: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lease_renewal_seconds", Help: "Round trip of each confirmed renewal.", Buckets: durations,
		}, []string{"issuer"}),
		margin: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lease_margin_seconds", Help: "Time left before the deadline at each confirmed renewal.", Buckets: durations,
		}, []string{"issuer"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lease_renewal_failures_total", Help: "Renewals that failed and were tried again.",
		}, per),
		risks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lease_at_risk_total", Help: "Renewals that failed or confirmed with a thin margin.",
		}, per),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lease_losses_total", Help: "Leases lost, by cause and by how the loss was learned.",
		}, append(append([]string(nil), per...), "cause", "via")),
	}
}

func (o *Observer) labels(e health.Event) []string {
	if o.subject {
		return []string{e.Issuer, e.Subject}
	}
	return []string{e.Issuer}
}

// Observe counts e.
func (o *Observer) Observe(e health.Event) {
	switch e.Kind {
	case health.Granted:
		o.held.WithLabelValues(o.labels(e)...).Inc()
		o.transitions.WithLabelValues(o.labels(e)...).Inc()
		o.wait.WithLabelValues(e.Issuer).Observe(e.Wait.Seconds())
	case health.Renewed:
		o.renewal.WithLabelValues(e.Issuer).Observe(e.RoundTrip.Seconds())
		o.margin.WithLabelValues(e.Issuer).Observe(e.Margin.Seconds())
	case health.RenewalFailed:
		o.failures.WithLabelValues(o.labels(e)...).Inc()
	case health.AtRisk:
		o.risks.WithLabelValues(o.labels(e)...).Inc()
	case health.Lost:
		o.held.WithLabelValues(o.labels(e)...).Dec()
		o.losses.WithLabelValues(append(o.labels(e), health.Cause(e.Err), e.Via.String())...).Inc()
	case health.Released:
		o.held.WithLabelValues(o.labels(e)...).Dec()
	}
}

func (o *Observer) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.held, o.transitions, o.wait, o.renewal, o.margin, o.failures, o.risks, o.losses}
}

// Describe sends the descriptors of every metric.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range o.collectors() {
		c.Describe(ch)
	}
}

// Collect sends every series.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	for _, c := range o.collectors() {
		c.Collect(ch)
	}
}
