package otelhealth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/health/otelhealth"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

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

// collect returns the instruments' data by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	return got
}

func sum(t *testing.T, a metricdata.Aggregation) int64 {
	t.Helper()
	s, ok := a.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%T, want a Sum[int64]", a)
	}
	var n int64
	for _, p := range s.DataPoints {
		n += p.Value
	}
	return n
}

func count(t *testing.T, a metricdata.Aggregation) uint64 {
	t.Helper()
	h, ok := a.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%T, want a Histogram[float64]", a)
	}
	var n uint64
	for _, p := range h.DataPoints {
		n += p.Count
	}
	return n
}

func TestInstruments(t *testing.T) {
	r := sdkmetric.NewManualReader()
	o, err := otelhealth.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)), otelhealth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	feed(o)
	got := collect(t, r)
	for name, want := range map[string]int64{"lease.held": 0, "lease.transitions": 2, "lease.renewal.failures": 1, "lease.at_risk": 2, "lease.losses": 1} {
		if n := sum(t, got[name]); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
	for name, want := range map[string]uint64{"lease.acquire.wait": 2, "lease.renewal.duration": 2, "lease.margin": 2} {
		if n := count(t, got[name]); n != want {
			t.Errorf("%s: %d values, want %d", name, n, want)
		}
	}
	losses := got["lease.losses"].(metricdata.Sum[int64]).DataPoints[0].Attributes
	for k, want := range map[attribute.Key]string{"lease.issuer": "redislease", "lease.cause": "key deleted", "lease.via": "push"} {
		if v, _ := losses.Value(k); v.AsString() != want {
			t.Errorf("lease.losses %s = %q, want %q", k, v.AsString(), want)
		}
	}
	if _, ok := losses.Value("lease.subject"); ok {
		t.Error("lease.losses has a subject with Options.Subject false")
	}
}

func TestSubjectAttribute(t *testing.T) {
	r := sdkmetric.NewManualReader()
	o, err := otelhealth.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)), otelhealth.Options{Subject: true})
	if err != nil {
		t.Fatal(err)
	}
	feed(o)
	if n := len(collect(t, r)["lease.transitions"].(metricdata.Sum[int64]).DataPoints); n != 2 {
		t.Errorf("lease.transitions with subjects: %d series, want 2", n)
	}
}
