package healthtest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/health/internal/healthtest"
	"github.com/zukhruf/lease/health/otelhealth"
	"github.com/zukhruf/lease/health/promhealth"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/redislease"
)

var server *healthtest.Redis

func TestMain(m *testing.M) {
	var err error
	if server, err = healthtest.StartRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// scrape returns the Prometheus handler's text.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEveryMetricMoves: a lease renewed and released, another lost to a
// slowed link after a failed renewal, on a real redis-server: the
// Prometheus handler's scrape and the OpenTelemetry reader show every
// metric moved.
func TestEveryMetricMoves(t *testing.T) {
	reg := prometheus.NewRegistry()
	prom := promhealth.New(promhealth.Options{})
	reg.MustRegister(prom)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	otel, err := otelhealth.New(mp, otelhealth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := healthtest.Tee{prom, otel}

	rdb := redis.NewClient(&redis.Options{Addr: server.Addr})
	defer rdb.Close()
	l, err := redislease.Config{TTL: time.Second, Observer: o}.Lock(t.Context(), rdb, "scraped")
	if err != nil {
		t.Fatal(err)
	}
	held := scrape(t, srv.URL)
	if !strings.Contains(held, `lease_held{issuer="redislease"} 1`) {
		t.Errorf("while held, the scrape has no lease_held 1:\n%s", held)
	}
	time.Sleep(time.Second) // renewals
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A link cut under a lease: a renewal fails, and the session dials
	// again.
	cutRenewal(t, o)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// A link slowed past the window: the lease is lost by its deadline.
	if _, err := healthtest.SlowedRun(ctx, server.Addr, "scraped-lost", 2, 1.5, o); err != nil {
		t.Fatal(err)
	}

	text := scrape(t, srv.URL)
	for _, want := range []string{
		`lease_held{issuer="redislease"} 0`,
		`lease_transitions_total{issuer="redislease"} 3`,
		`lease_acquire_wait_seconds_count{issuer="redislease"} 3`,
		`lease_losses_total{cause="renewal unconfirmed",issuer="redislease",via="deadline"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape has no %s", want)
		}
	}
	for _, moved := range []string{"lease_renewal_seconds_count", "lease_margin_seconds_count", "lease_renewal_failures_total", "lease_at_risk_total"} {
		if !positive(text, moved) {
			t.Errorf("the scrape's %s did not move", moved)
		}
	}
	if t.Failed() {
		t.Logf("the scrape:\n%s", text)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					seen[m.Name] = seen[m.Name] || p.Value != 0 || m.Name == "lease.held"
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					seen[m.Name] = seen[m.Name] || p.Count > 0
				}
			}
		}
	}
	for _, name := range []string{"lease.held", "lease.transitions", "lease.acquire.wait", "lease.renewal.duration", "lease.margin", "lease.renewal.failures", "lease.at_risk", "lease.losses"} {
		if !seen[name] {
			t.Errorf("OpenTelemetry's %s did not move", name)
		}
	}
}

// positive reports whether a series of the metric name has a value above 0
// in the text.
func positive(text, name string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			if v := f[len(f)-1]; v != "0" {
				return true
			}
		}
	}
	return false
}

// TestAtRiskBeforeLoss: a link slowed until a round trip takes 80% of the
// deadline span loses the lease by its deadline, and AtRisk is reported
// before the loss, in each of 30 trials.
func TestAtRiskBeforeLoss(t *testing.T) {
	const trials = 30
	sum := healthrec.Summary{Trials: trials}
	for i := range trials {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		events, err := healthtest.SlowedRun(ctx, server.Addr, fmt.Sprintf("at-risk-%d", i), 2, 0.8, nil)
		cancel()
		if err != nil {
			t.Fatalf("trial %d: %v", i, err)
		}
		// Past the deadline only the Lost event may tell.
		w, err := healthrec.AtRiskBeforeLoss(events, healthrec.Trial{TimeLeft: true})
		if err != nil {
			t.Errorf("trial %d: %v", i, err)
			continue
		}
		sum.Margins = append(sum.Margins, w.Margin) // the time left before the deadline, warned
	}
	if sum.Warned() > 0 {
		t.Log(sum)
	}
}

// cutRenewal holds a lease through a proxy, cuts the proxy's connections
// and waits until a renewal failed; then it releases the lease.
func cutRenewal(t *testing.T, o health.Observer) {
	t.Helper()
	proxy, err := faultnet.Listen(server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	defer rdb.Close()
	failed := make(chan struct{}, 1)
	watch := health.ObserverFunc(func(e health.Event) {
		if e.Kind == health.RenewalFailed {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	})
	l, err := redislease.Config{TTL: 2 * time.Second, Observer: healthtest.Tee{o, watch}}.Lock(t.Context(), rdb, "cut")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	for {
		proxy.Cut()
		select {
		case <-failed:
			return
		case <-l.Signal().Done():
			t.Fatalf("the lease was lost before a renewal failed: %v", l.Signal().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
