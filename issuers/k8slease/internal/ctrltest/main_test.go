package ctrltest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/zukhruf/lease/issuers/ctrllease"
	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
	"github.com/zukhruf/lease/lost"
)

// ns is the namespace of every Lease and ConfigMap of the tests.
const ns = "default"

// shared is the apiserver the tests share; admin is a clientset of it.
var (
	shared *kubetest.Server
	admin  kubernetes.Interface
)

func TestMain(m *testing.M) {
	kubetest.ChildMain(map[string]kubetest.Role{
		"replica": childReplica,
		"stock":   childStock,
	})
	flag.Parse()
	klog.SetLogger(logr.Discard())
	ctrllog.SetLogger(logr.Discard())
	s, stop, err := kubetest.StartShared()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, admin = s, s.Clientset()
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(kubetest.IgnoreGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// uniqueName returns a name no other object of the test binary has.
func uniqueName(t testing.TB) string { return kubetest.UniqueName(t) }

// ownConfig returns a copy of cfg whose clients get connections of their
// own: clients of one rest.Config share client-go's cached transport.
func ownConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	return cfg
}

func clientset(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(ownConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// leaseConfig is the lease of the tests: 2 s, renewed each second.
var leaseConfig = k8slease.Config{LeaseDuration: 2 * time.Second}

// span is one run of leader-only work: from its start to its return.
type span struct {
	who        string
	term       int
	start, end time.Time // end is zero while it runs
	lastWrite  time.Time // the last write it sent
	cause      error     // context.Cause of its context when it returned
}

// book records the leader-only work of every replica of a test, and the
// setups, on one clock.
type book struct {
	mu     sync.Mutex
	spans  []*span
	setups []setupAt
	late   []string // ctrllease Reconciles entered with their term's context already done
	// stockLate counts a stock Manager's Reconciles entered with their
	// context already done: controller-runtime's workers take an item
	// from the queue without looking at their context.
	stockLate int
}

type setupAt struct {
	who  string
	term int
	at   time.Time
}

func (b *book) begin(who string, term int) *span {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := &span{who: who, term: term, start: time.Now()}
	b.spans = append(b.spans, s)
	return s
}

func (b *book) wroteAt(s *span, at time.Time) {
	b.mu.Lock()
	s.lastWrite = at
	b.mu.Unlock()
}

func (b *book) finish(s *span, cause error) {
	b.mu.Lock()
	s.end, s.cause = time.Now(), cause
	b.mu.Unlock()
}

func (b *book) setup(who string, term int) {
	b.mu.Lock()
	b.setups = append(b.setups, setupAt{who, term, time.Now()})
	b.mu.Unlock()
}

// overlaps names each pair of spans of different replicas that ran at
// once, and each setup that began while another replica's work ran.
func (b *book) overlaps() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append([]string(nil), b.late...)
	running := func(s *span, at time.Time) bool {
		return !at.Before(s.start) && (s.end.IsZero() || at.Before(s.end))
	}
	for _, su := range b.setups {
		for _, s := range b.spans {
			if s.who != su.who && running(s, su.at) {
				out = append(out, fmt.Sprintf("%s's setup of term %d began while %s's work of term %d ran", su.who, su.term, s.who, s.term))
			}
		}
	}
	for i, s := range b.spans {
		for _, o := range b.spans[i+1:] {
			if s.who != o.who && (running(s, o.start) || running(o, s.start)) {
				out = append(out, fmt.Sprintf("%s's work of term %d and %s's of term %d ran at once", s.who, s.term, o.who, o.term))
			}
		}
	}
	return out
}

// setupsOf returns the times of who's setups.
func (b *book) setupsOf(who string) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []time.Time
	for _, s := range b.setups {
		if s.who == who {
			out = append(out, s.at)
		}
	}
	return out
}

// spansOf returns copies of who's spans.
func (b *book) spansOf(who string) []span {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []span
	for _, s := range b.spans {
		if s.who == who {
			out = append(out, *s)
		}
	}
	return out
}

// writer is the leader-only work of the tests: a reconciler of one
// ConfigMap that, once asked, writes an annotation to it every 20 ms until
// its context ends, through the client it is given.
type writer struct {
	who    string
	term   int
	cm     string
	client client.Client
	book   *book
	// refused counts the writes that returned an error of package lost.
	refused atomic.Int64
	// stock is set for a stock Manager's writer.
	stock bool
	// emit, if set, tells another process of the spans as well.
	emit func(what string, term int, cause error, at time.Time)
}

func (w *writer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if ctx.Err() != nil {
		w.book.mu.Lock()
		if w.stock {
			w.book.stockLate++
		} else {
			w.book.late = append(w.book.late, fmt.Sprintf("%s's Reconcile of term %d entered after the term ended (%v)", w.who, w.term, context.Cause(ctx)))
		}
		w.book.mu.Unlock()
		return reconcile.Result{}, nil
	}
	s := w.book.begin(w.who, w.term)
	w.tell("begin", nil)
	defer func() {
		w.book.finish(s, context.Cause(ctx))
		w.tell("end", context.Cause(ctx))
	}()
	for n := 0; ; n++ {
		if ctx.Err() != nil {
			return reconcile.Result{}, nil
		}
		at := time.Now()
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"writer":"%s-%d-%d"}}}`, w.who, w.term, n))
		err := w.client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}, patch)
		var le *lost.Error
		if errors.As(err, &le) {
			w.refused.Add(1) // refused by the gate: nothing sent
		} else {
			w.book.wroteAt(s, at)
			if w.emit != nil {
				w.emit("write", w.term, nil, at)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (w *writer) tell(what string, cause error) {
	if w.emit != nil {
		w.emit(what, w.term, cause, time.Now())
	}
}

// register builds the writer's controller on m, for the ConfigMap cm only.
func (w *writer) register(m manager.Manager) error {
	return ctrl.NewControllerManagedBy(m).
		Named("writer").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == ns && o.GetName() == w.cm
		}))).
		Complete(w)
}

// makeConfigMap creates the ConfigMap name.
func makeConfigMap(t testing.TB, name string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	_, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// newManager returns a Manager of cfg without metrics or probes. The
// controllers a term builds skip the check of unique names by themselves;
// a stock Manager's do not, and o says so for the tests that make several.
func newManager(t testing.TB, cfg *rest.Config, o manager.Options) manager.Manager {
	t.Helper()
	o.Metrics = metricsserver.Options{BindAddress: "0"}
	o.Logger = logr.Discard()
	m, err := manager.New(ownConfig(cfg), o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// replica is a ctrllease replica of a test: a Manager with an Elector
// whose terms run a writer of the ConfigMap cm.
type replica struct {
	who     string
	mgr     manager.Manager
	elector *ctrllease.Elector
	stop    context.CancelFunc
	done    chan struct{}
	err     error // mgr.Start's, once done is closed

	mu      sync.Mutex
	writers []*writer
	leases  []*k8slease.Lease
}

// replicaOptions change a replica's Options and setup.
type replicaOptions struct {
	cfg   *rest.Config // nil means shared.Config()
	opts  func(*ctrllease.Options)
	mgr   manager.Options
	setup ctrllease.Setup // nil means the writer's
}

// startReplica starts a replica on the Lease name, with the writer of cm;
// it is stopped when the test ends.
func startReplica(t testing.TB, b *book, who, name, cm string, ro replicaOptions) *replica {
	t.Helper()
	cfg := ro.cfg
	if cfg == nil {
		cfg = shared.Config()
	}
	r := &replica{who: who, done: make(chan struct{})}
	r.mgr = newManager(t, cfg, ro.mgr)
	o := ctrllease.Options{
		Namespace: ns, Name: name, Identity: who,
		Config: leaseConfig,
		Client: clientset(t, cfg),
	}
	if ro.opts != nil {
		ro.opts(&o)
	}
	setup := ro.setup
	if setup == nil {
		setup = func(m manager.Manager, l *k8slease.Lease) error {
			term := len(b.setupsOf(who)) + 1
			b.setup(who, term)
			w := &writer{who: who, term: term, cm: cm, client: m.GetClient(), book: b}
			r.mu.Lock()
			r.writers = append(r.writers, w)
			r.leases = append(r.leases, l)
			r.mu.Unlock()
			// A runnable that returns ctx.Err() at the end of the term, as
			// many do: the end of a term, not a failure.
			if err := m.Add(manager.RunnableFunc(func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			})); err != nil {
				return err
			}
			return w.register(m)
		}
	}
	var err error
	if r.elector, err = ctrllease.Add(r.mgr, o, setup); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() {
		defer close(r.done)
		r.err = r.mgr.Start(ctx)
	}()
	t.Cleanup(func() {
		r.stop()
		<-r.done
	})
	return r
}

// lease returns the lease of the replica's last term.
func (r *replica) lease() *k8slease.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.leases) == 0 {
		return nil
	}
	return r.leases[len(r.leases)-1]
}

// waitFor polls cond every 5 ms until it holds, or fails t after within.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
	}
}

// waitLeading waits for r to lead with its writer running.
func waitLeading(t testing.TB, b *book, r *replica, term int) {
	t.Helper()
	waitFor(t, 30*time.Second, r.who+" leads term "+fmt.Sprint(term), func() bool {
		for _, s := range b.spansOf(r.who) {
			if s.term == term {
				return true
			}
		}
		return false
	})
}

// holderOf returns the holder the Lease name records, "" for none.
func holderOf(t testing.TB, name string) string {
	t.Helper()
	l, err := admin.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// lateStarts counts the Reconciles entered after their term ended.
func (b *book) lateStarts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.late)
}
