package ctrltest

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/zukhruf/lease/issuers/ctrllease"
	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/lost"
)

var handoverTrials = flag.Int("handover.trials", 5, "hand-overs after a stop that TestStopHandsOver measures")

// takeOver rewrites the Lease name as an operator would: another holder,
// renewed now.
func takeOver(t testing.TB, name, holder string) {
	t.Helper()
	if err := overwrite(name, holder); err != nil {
		t.Fatal(err)
	}
}

// overwrite is takeOver's work, again on a conflict.
func overwrite(name, holder string) error {
	leases := admin.CoordinationV1().Leases(ns)
	for {
		l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity = &holder
		l.Spec.RenewTime = &now
		l.Spec.AcquireTime = &now
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) {
			return err
		}
	}
}

// TestTakeoverCutsTheTerm has an operator take the Lease from the leader:
// the term's reconcile is cut with the *lost.Error, before another replica's
// setup; the replica campaigns again, alive.
func TestTakeoverCutsTheTerm(t *testing.T) {
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	makeConfigMap(t, cm)
	a := startReplica(t, b, "a", name, cm, replicaOptions{})
	waitLeading(t, b, a, 1)
	bb := startReplica(t, b, "b", name, cm, replicaOptions{})

	takeOver(t, name, "operator")
	waitFor(t, 10*time.Second, "a's term ends", func() bool { return !a.elector.Leading() })
	s := b.spansOf("a")[0]
	var le *lost.Error
	if !errors.As(s.cause, &le) || !errors.Is(s.cause, k8slease.ErrTakenOver) {
		t.Fatalf("a's reconcile was cut with %v, want a *lost.Error of ErrTakenOver", s.cause)
	}
	// The operator's record expires after its 2 s; then a replica leads
	// again, a or b.
	waitFor(t, 20*time.Second, "a new term", func() bool { return len(b.setupsOf("a"))+len(b.setupsOf("b")) >= 2 })
	if o := b.overlaps(); len(o) > 0 {
		t.Fatalf("overlaps: %s", strings.Join(o, "; "))
	}
	if err := a.elector.Err(); err != nil {
		t.Fatalf("a's elector stopped: %v", err)
	}
	select {
	case <-a.done:
		t.Fatalf("a's Manager stopped after the loss: %v", a.err)
	default:
	}
	_ = bb
}

// TestStopHandsOver stops the leader's Manager while another replica waits:
// the term's work returns, the Lease is released, and the other replica's
// setup runs within a round trip or so; the figure is the median.
func TestStopHandsOver(t *testing.T) {
	var gaps []time.Duration
	for range *handoverTrials {
		b := &book{}
		name, cm := uniqueName(t), uniqueName(t)
		makeConfigMap(t, cm)
		a := startReplica(t, b, "a", name, cm, replicaOptions{})
		waitLeading(t, b, a, 1)
		bb := startReplica(t, b, "b", name, cm, replicaOptions{})
		time.Sleep(300 * time.Millisecond) // b's campaign under way
		a.stop()
		<-a.done
		if a.err != nil || a.elector.Err() != nil {
			t.Fatalf("a's Manager stopped with %v, its elector with %v", a.err, a.elector.Err())
		}
		waitLeading(t, b, bb, 1)
		if o := b.overlaps(); len(o) > 0 {
			t.Fatalf("overlaps: %s", strings.Join(o, "; "))
		}
		returned := b.spansOf("a")[0].end
		gaps = append(gaps, b.setupsOf("b")[0].Sub(returned))
		if h := holderOf(t, name); h != "b" {
			t.Fatalf("after the hand-over the Lease names %q", h)
		}
	}
	slices.Sort(gaps)
	t.Logf("a's work returned → b's setup: median %v, max %v over %d hand-overs", gaps[len(gaps)/2], gaps[len(gaps)-1], len(gaps))
}

// countingCache counts the event handlers on the shared informers of a
// Manager's cache.
type countingCache struct {
	cache.Cache
	live *atomic.Int64
}

func (c *countingCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return &countingInformer{i, c.live}, nil
}

type countingInformer struct {
	cache.Informer
	live *atomic.Int64
}

func (i *countingInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	r, err := i.Informer.AddEventHandlerWithOptions(h, o)
	if err == nil {
		i.live.Add(1)
	}
	return r, err
}

func (i *countingInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	err := i.Informer.RemoveEventHandler(r)
	if err == nil {
		i.live.Add(-1)
	}
	return err
}

// TestTermsInOneProcess deletes the Lease under its leader ten times: each
// time the term ends, the replica campaigns again in the same process and
// leads a new term with a new controller of the same name; goroutines,
// heap and the handlers on the shared informer stay flat.
func TestTermsInOneProcess(t *testing.T) {
	const terms = 10
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	makeConfigMap(t, cm)
	var handlers atomic.Int64
	a := startReplica(t, b, "a", name, cm, replicaOptions{mgr: manager.Options{
		NewCache: func(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
			c, err := cache.New(cfg, o)
			return &countingCache{c, &handlers}, err
		},
	}})
	var goroutines []int
	var heap []uint64
	for term := 1; ; term++ {
		waitLeading(t, b, a, term)
		if n := handlers.Load(); n != 1 {
			t.Fatalf("term %d: %d event handlers on the shared informers, want the term's 1", term, n)
		}
		if term > 1 {
			if errs := a.elector.Err(); errs != nil {
				t.Fatal(errs)
			}
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		goroutines = append(goroutines, runtime.NumGoroutine())

		heap = append(heap, ms.HeapAlloc)
		if term == terms {
			break
		}
		l := a.lease()
		if err := admin.CoordinationV1().Leases(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		<-l.Signal().Done()
		if !errors.Is(l.Signal().Err(), k8slease.ErrDeleted) {
			t.Fatalf("term %d lost with %v, want ErrDeleted", term, l.Signal().Err())
		}
	}
	if a.elector.Terms() != terms {
		t.Fatalf("%d terms, want %d", a.elector.Terms(), terms)
	}
	for i, s := range b.spansOf("a") {
		if !errors.Is(s.cause, k8slease.ErrDeleted) && i < terms-1 {
			t.Fatalf("term %d's reconcile ended with %v, want the deletion", i+1, s.cause)
		}
	}
	t.Logf("goroutines at each term: %v; heap (KiB): %v", goroutines, kib(heap))
	// Flat: the last term has no more goroutines than the second, but for
	// one or two of the runtime's and client-go's that come and go, and a
	// heap within 2 MiB of it.
	if goroutines[terms-1] > goroutines[1]+2 {
		t.Fatalf("goroutines grew from %d at term 2 to %d at term %d", goroutines[1], goroutines[terms-1], terms)
	}
	if heap[terms-1] > heap[1]+2<<20 {
		t.Fatalf("heap grew from %d KiB at term 2 to %d KiB at term %d", heap[1]>>10, heap[terms-1]>>10, terms)
	}
	if o := b.overlaps(); len(o) > 0 {
		t.Fatalf("overlaps: %s", strings.Join(o, "; "))
	}
}

func kib(b []uint64) []uint64 {
	out := make([]uint64, len(b))
	for i, v := range b {
		out[i] = v >> 10
	}
	return out
}

// writeCounter counts the write requests a client sends to the apiserver,
// with their send times.
type writeCounter struct {
	mu   sync.Mutex
	sent []time.Time
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/configmaps/") {
			c.mu.Lock()
			c.sent = append(c.sent, time.Now())
			c.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (c *writeCounter) after(t time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.sent {
		if s.After(t) {
			n++
		}
	}
	return n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestGateStopsWritesAfterTheLoss runs a term's runnable that goes on
// writing through the term's client after its context ended, as a
// reconciler that ignores its context would: once the gate has refused one
// write, no write request reaches the apiserver (counted at the
// transport), and the five writes after the end are refused.
func TestGateStopsWritesAfterTheLoss(t *testing.T) {
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	makeConfigMap(t, cm)
	counter := &writeCounter{}
	cfg := shared.Config()
	cfg.WrapTransport = counter.wrap
	g := &gated{}
	var writes sync.WaitGroup
	writes.Add(1)
	a := startReplica(t, b, "a", name, cm, replicaOptions{cfg: cfg, setup: func(m manager.Manager, l *k8slease.Lease) error {
		b.setup("a", 1)
		c := m.GetClient()
		return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
			defer writes.Done()
			s := b.begin("a", 1)
			defer func() { b.finish(s, context.Cause(ctx)) }()
			obj := client.ObjectKey{Namespace: ns, Name: cm}
			for ctx.Err() == nil {
				g.patch(context.WithoutCancel(ctx), c, obj)
				time.Sleep(20 * time.Millisecond)
			}
			for range 5 {
				g.patch(context.Background(), c, obj)
			}
			return nil
		}))
	}})
	waitLeading(t, b, a, 1)
	waitFor(t, 10*time.Second, "a writes", func() bool { return counter.after(time.Time{}) >= 3 })
	takeOver(t, name, "operator")
	writes.Wait()
	first, refused := g.refusals()
	if refused < 5 {
		t.Fatalf("%d writes after the loss were refused by the gate, want 5 at least", refused)
	}
	if n := counter.after(first); n != 0 {
		t.Fatalf("%d writes reached the apiserver after the gate's first refusal", n)
	}
}

// gated writes through a term's client and counts the writes its gate
// refused.
type gated struct {
	mu      sync.Mutex
	first   time.Time // the first refusal
	refused int
}

func (g *gated) patch(ctx context.Context, c client.Client, key client.ObjectKey) {
	err := c.Patch(ctx, configMap(key), client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"stubborn":"`+time.Now().Format(time.RFC3339Nano)+`"}}}`)))
	if errors.As(err, new(*lost.Error)) {
		g.mu.Lock()
		if g.refused == 0 {
			g.first = time.Now()
		}
		g.refused++
		g.mu.Unlock()
	}
}

func (g *gated) refusals() (time.Time, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.first, g.refused
}

// stubborn is a runnable of a term that returns only when released.
type stubborn struct{ release chan struct{} }

func (s *stubborn) Start(context.Context) error {
	<-s.release
	return nil
}

// TestStopTimeoutLeavesTheLeaseToRunOut stops a Manager whose term's work
// does not return: after the stop timeout the Lease is not released, the
// lease runs out at its deadline, the waiting replica is granted only after
// that, and the elector's error names the work.
func TestStopTimeoutLeavesTheLeaseToRunOut(t *testing.T) {
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	makeConfigMap(t, cm)
	st := &stubborn{release: make(chan struct{})}
	defer close(st.release)
	var term *k8slease.Lease
	a := startReplica(t, b, "a", name, cm, replicaOptions{
		opts: func(o *ctrllease.Options) { o.StopTimeout = time.Second },
		mgr:  manager.Options{GracefulShutdownTimeout: new(10 * time.Second)},
		setup: func(m manager.Manager, l *k8slease.Lease) error {
			term = l
			b.setup("a", 1)
			return m.Add(st)
		},
	})
	waitFor(t, 30*time.Second, "a leads", a.elector.Leading)
	bb := startReplica(t, b, "b", name, cm, replicaOptions{})
	stopped := time.Now()
	a.stop()
	waitFor(t, 10*time.Second, "a's elector gives up", func() bool { return a.elector.Err() != nil })
	gaveUp := time.Now()
	err := a.elector.Err()
	if !strings.Contains(err.Error(), "runnable *ctrltest.stubborn") || !strings.Contains(err.Error(), "stop timeout 1s") {
		t.Fatalf("a's elector: %v; want it to name the stubborn runnable and the timeout", err)
	}
	if d := gaveUp.Sub(stopped); d < time.Second {
		t.Fatalf("a's elector gave up %v after the stop, before its stop timeout", d)
	}
	if h := holderOf(t, name); h != "a" {
		t.Fatalf("after the stop timeout the Lease names %q: a's record was released under running work", h)
	}
	if !a.elector.Leading() {
		t.Fatal("a does not lead while its work still runs")
	}
	waitLeading(t, b, bb, 1)
	select {
	case <-term.Signal().Done():
	default:
		t.Fatal("b leads while a's lease is not lost")
	}
	if bSetup := b.setupsOf("b")[0]; !bSetup.After(gaveUp) {
		t.Fatal("b's setup came before a gave up")
	}
}

// slow is a runnable of a term that returns a while after its context
// ended.
type slow struct {
	after    time.Duration
	returned atomic.Int64 // UnixNano
}

func (s *slow) Start(ctx context.Context) error {
	<-ctx.Done()
	time.Sleep(s.after)
	s.returned.Store(time.Now().UnixNano())
	return nil
}

// TestStopRenewsWhileTheWorkReturns stops a Manager whose term's work takes
// 3 s to return, longer than the 2 s lease: the lease is renewed
// meanwhile, so it is never lost, and the Lease is released only after the
// work returned; the waiting replica leads then.
func TestStopRenewsWhileTheWorkReturns(t *testing.T) {
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	makeConfigMap(t, cm)
	work := &slow{after: 3 * time.Second}
	var term *k8slease.Lease
	a := startReplica(t, b, "a", name, cm, replicaOptions{
		opts: func(o *ctrllease.Options) { o.StopTimeout = 10 * time.Second },
		mgr:  manager.Options{GracefulShutdownTimeout: new(20 * time.Second)},
		setup: func(m manager.Manager, l *k8slease.Lease) error {
			term = l
			b.setup("a", 1)
			return m.Add(work)
		},
	})
	waitFor(t, 30*time.Second, "a leads", a.elector.Leading)
	bb := startReplica(t, b, "b", name, cm, replicaOptions{})
	time.Sleep(300 * time.Millisecond) // b campaigns
	a.stop()
	<-a.done
	if a.err != nil || a.elector.Err() != nil {
		t.Fatalf("a's Manager stopped with %v, its elector with %v", a.err, a.elector.Err())
	}
	if err := term.Signal().Err(); err != nil {
		t.Fatalf("a's lease was lost while its work returned: %v", err)
	}
	waitLeading(t, b, bb, 1)
	returned := time.Unix(0, work.returned.Load())
	if setup := b.setupsOf("b")[0]; !setup.After(returned) {
		t.Fatalf("b's setup came %v before a's work returned", returned.Sub(setup))
	}
}

// TestSetupFailureReleases gives a setup that fails: the term is given up,
// the Lease released at once, and the Manager's Start returns the error.
func TestSetupFailureReleases(t *testing.T) {
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	failure := errors.New("no CRD installed")
	a := startReplica(t, b, "a", name, cm, replicaOptions{setup: func(manager.Manager, *k8slease.Lease) error { return failure }})
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the Manager did not stop after its setup failed")
	}
	if !errors.Is(a.err, failure) || !strings.Contains(a.err.Error(), "setup") {
		t.Fatalf("mgr.Start = %v, want the setup's error", a.err)
	}
	if h := holderOf(t, name); h != "" {
		t.Fatalf("after the setup failed the Lease names %q, want it released", h)
	}
	if a.elector.Leading() {
		t.Fatal("a leads after its setup failed")
	}
}

// TestCampaignRefusedWithoutWatch runs the Elector as a user whose Role
// lacks watch on leases: the Manager's Start fails at once, naming it.
func TestCampaignRefusedWithoutWatch(t *testing.T) {
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	cfg := restricted(t, "get", "create", "update")
	a := startReplica(t, b, "a", name, cm, replicaOptions{opts: func(o *ctrllease.Options) { o.Client = clientset(t, cfg) }})
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the Manager did not stop")
	}
	if a.err == nil || !strings.Contains(a.err.Error(), "watch") || !strings.Contains(a.err.Error(), "campaign") {
		t.Fatalf("mgr.Start = %v, want an error of the campaign naming watch", a.err)
	}
}

// TestAddAfterStart adds an Elector to a Manager that runs.
func TestAddAfterStart(t *testing.T) {
	m := newManager(t, shared.Config(), manager.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	defer func() { cancel(); <-done }()
	<-m.Elected()
	_, err := ctrllease.Add(m, ctrllease.Options{Namespace: ns, Name: uniqueName(t)}, func(manager.Manager, *k8slease.Lease) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "after the Manager started") {
		t.Fatalf("Add after Start = %v", err)
	}
}

// configMap returns a ConfigMap with key's namespace and name.
func configMap(key client.ObjectKey) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
}

// restricted returns the configuration of a user whose Role in ns grants
// verbs on leases.
func restricted(t *testing.T, verbs ...string) *rest.Config {
	t.Helper()
	cfg, _ := shared.Restricted(t, ns, verbs...)
	return cfg
}
