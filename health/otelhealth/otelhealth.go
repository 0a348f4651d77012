// Package otelhealth records the events of leases in OpenTelemetry
// metrics: an [Observer] is a [health.Observer] to set on an issuer's Config
// (or etcdlease.WithObserver), made from a [metric.MeterProvider].
//
// The instruments follow OpenTelemetry's naming conventions (dotted
// names, the unit in the instrument's unit rather than its name, no _total:
// an exporter adds them; Prometheus's exporter writes lease.acquire.wait in
// seconds as lease_acquire_wait_seconds), each with the attribute
// lease.issuer, and lease.subject where [Options.Subject] asks (off by
// default: one series per subject, whose count the caller must bound):
//
//   - lease.held: the leases held now (UpDownCounter, {lease})
//   - lease.transitions: the leases granted (Counter, {lease})
//   - lease.acquire.wait: how long each Lock waited (Histogram, s)
//   - lease.renewal.duration: the round trip of each confirmed renewal (Histogram, s)
//   - lease.margin: the margin left at each confirmed renewal (Histogram, s)
//   - lease.renewal.failures: renewals that failed, and were tried again (Counter, {renewal})
//   - lease.at_risk: renewals that failed or left a thin margin (Counter, {renewal})
//   - lease.losses: losses, also with lease.cause ([health.Cause]) and lease.via (Counter, {lease})
package otelhealth

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/zukhruf/lease/health"
)

// ScopeName is the instrumentation scope of the meter an Observer uses.
const ScopeName = "github.com/zukhruf/lease/health/otelhealth"

// Options sets what an Observer records.
type Options struct {
	// Subject adds the attribute lease.subject to the instruments counted
	// per lease. Each subject is then a series of its own: set it only
	// where the subjects are few.
	Subject bool
}

// Observer records the events it observes. Make one with [New]; it is
// safe for use by many goroutines at once.
type Observer struct {
	subject bool

	held        metric.Int64UpDownCounter
	transitions metric.Int64Counter
	wait        metric.Float64Histogram
	renewal     metric.Float64Histogram
	margin      metric.Float64Histogram
	failures    metric.Int64Counter
	risks       metric.Int64Counter
	losses      metric.Int64Counter
}

var _ health.Observer = (*Observer)(nil)

// New returns an Observer that records through a meter of mp, or the
// error of an instrument mp could not make.
func New(mp metric.MeterProvider, o Options) (*Observer, error) {
	m := mp.Meter(ScopeName)
	ob := &Observer{subject: o.Subject}
	var errs [8]error
	ob.held, errs[0] = m.Int64UpDownCounter("lease.held", metric.WithDescription("Leases held now."), metric.WithUnit("{lease}"))
	ob.transitions, errs[1] = m.Int64Counter("lease.transitions", metric.WithDescription("Leases granted."), metric.WithUnit("{lease}"))
	ob.wait, errs[2] = m.Float64Histogram("lease.acquire.wait", metric.WithDescription("Time a Lock waited for its grant."), metric.WithUnit("s"))
	ob.renewal, errs[3] = m.Float64Histogram("lease.renewal.duration", metric.WithDescription("Round trip of each confirmed renewal."), metric.WithUnit("s"))
	ob.margin, errs[4] = m.Float64Histogram("lease.margin", metric.WithDescription("Time left before the deadline at each confirmed renewal."), metric.WithUnit("s"))
	ob.failures, errs[5] = m.Int64Counter("lease.renewal.failures", metric.WithDescription("Renewals that failed and were tried again."), metric.WithUnit("{renewal}"))
	ob.risks, errs[6] = m.Int64Counter("lease.at_risk", metric.WithDescription("Renewals that failed or confirmed with a thin margin."), metric.WithUnit("{renewal}"))
	ob.losses, errs[7] = m.Int64Counter("lease.losses", metric.WithDescription("Leases lost, by cause and by how the loss was learned."), metric.WithUnit("{lease}"))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return ob, nil
}

func (o *Observer) attrs(e health.Event, more ...attribute.KeyValue) metric.MeasurementOption {
	kv := make([]attribute.KeyValue, 0, 2+len(more))
	kv = append(kv, attribute.String("lease.issuer", e.Issuer))
	if o.subject {
		kv = append(kv, attribute.String("lease.subject", e.Subject))
	}
	return metric.WithAttributes(append(kv, more...)...)
}

// Observe records e.
func (o *Observer) Observe(e health.Event) {
	ctx := context.Background()
	issuer := metric.WithAttributes(attribute.String("lease.issuer", e.Issuer))
	switch e.Kind {
	case health.Granted:
		o.held.Add(ctx, 1, o.attrs(e))
		o.transitions.Add(ctx, 1, o.attrs(e))
		o.wait.Record(ctx, e.Wait.Seconds(), issuer)
	case health.Renewed:
		o.renewal.Record(ctx, e.RoundTrip.Seconds(), issuer)
		o.margin.Record(ctx, e.Margin.Seconds(), issuer)
	case health.RenewalFailed:
		o.failures.Add(ctx, 1, o.attrs(e))
	case health.AtRisk:
		o.risks.Add(ctx, 1, o.attrs(e))
	case health.Lost:
		o.held.Add(ctx, -1, o.attrs(e))
		o.losses.Add(ctx, 1, o.attrs(e, attribute.String("lease.cause", health.Cause(e.Err)), attribute.String("lease.via", e.Via.String())))
	case health.Released:
		o.held.Add(ctx, -1, o.attrs(e))
	}
}
