package ctrllease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/zukhruf/lease/issuers/k8slease"
)

// DefaultStopTimeout is the stop timeout of Options whose StopTimeout is
// zero: controller-runtime's default graceful shutdown timeout, 30 s, less
// 5 s for the Manager's other runnables and the release.
const DefaultStopTimeout = 25 * time.Second

// Options says which Lease the leader-only work runs under.
type Options struct {
	// Namespace and Name name the Lease. An empty Namespace means the
	// namespace of the pod this process runs in, read from its service
	// account as controller-runtime does; outside a pod, it must be set.
	Namespace, Name string

	// Identity is this replica's name in the Lease's record; it must be
	// unique among the replicas. "" means the host name, "_" and a random
	// UUID, as controller-runtime's leader election makes it.
	Identity string

	// Config is the lease's: duration, renewal and retry periods, margin.
	// Replicas that share a Lease, stock controller-runtime ones included,
	// should use one lease duration (controller-runtime's default is 15 s,
	// as k8slease's). Its Observer is told of each term's lease: a grant,
	// renewals, then a loss or a release; each term's Lease reports its
	// Health.
	Config k8slease.Config

	// Client is the clientset the lease is taken and renewed through. nil
	// means one made from mgr.GetConfig(), so that the lease's requests do
	// not wait behind the controllers' in one rate limiter.
	Client kubernetes.Interface

	// StopTimeout bounds how long, after the Manager's context ends, the
	// lease is renewed while the term's work returns; work that has not
	// returned by then is never unlocked under (see the package doc,
	// Stopping). Zero means DefaultStopTimeout. Keep it below the
	// Manager's GracefulShutdownTimeout, which bounds how long the Manager
	// waits for the Elector: Add refuses a StopTimeout that is not.
	StopTimeout time.Duration
}

// Setup registers one term's leader-only work on m: controllers
// (ctrl.NewControllerManagedBy(m)...Complete(r)) and runnables (m.Add).
// It is called once for each term this replica wins, with that term's
// lease, and must return promptly: the term's work starts when it returns.
// An error gives the term up: the Lease is released at once, and the
// Elector's Start returns the error, which stops the Manager.
type Setup func(m manager.Manager, lease *k8slease.Lease) error

// Elector is the runnable Add registers: it campaigns for the Lease and
// runs each term's work. Its methods are safe for concurrent use.
type Elector struct {
	mgr     manager.Manager
	opts    Options
	cs      kubernetes.Interface
	setup   Setup
	log     logr.Logger
	subject string

	started atomic.Bool
	leading atomic.Bool
	terms   atomic.Int64

	mu  sync.Mutex
	err error // what Start returned
}

// Add adds to mgr (made with LeaderElection false) a runnable that, for as
// long as mgr runs: campaigns for the Lease; when granted, calls setup and
// starts what it registered with a context that is the lease's
// (lease.Signal().Context); on loss, or when mgr stops, waits for all of it
// to return, then unlocks (after a stop) and campaigns again (after a loss).
//
// Add fails, naming the mistake, when mgr was made with LeaderElection true
// (two elections would each think they decide), when setup is nil, when
// mgr has already started, when o names no Lease, or when o.StopTimeout is
// negative or not below mgr's graceful shutdown timeout. A mistake only
// the apiserver can tell (a Role without watch on leases, a Config out of
// range) fails the first campaign at once: the Elector's Start returns it,
// and mgr's Start with it.
func Add(mgr manager.Manager, o Options, setup Setup) (*Elector, error) {
	switch {
	case isNil(mgr):
		return nil, errors.New("ctrllease: Add called with a nil Manager")
	case setup == nil:
		return nil, errors.New("ctrllease: Add called with a nil Setup")
	case o.Name == "":
		return nil, errors.New("ctrllease: Add: Options.Name is empty: name the Lease")
	case o.StopTimeout < 0:
		return nil, fmt.Errorf("ctrllease: Add: Options.StopTimeout %v is negative", o.StopTimeout)
	}
	if on, known := leaderElection(mgr); known && on {
		return nil, errors.New("ctrllease: Add: the Manager was made with LeaderElection true: make it with LeaderElection false, and let the Elector run the leader-only work")
	}
	select {
	case <-mgr.Elected():
		return nil, errors.New("ctrllease: Add called after the Manager started: add the Elector before mgr.Start")
	default:
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if grace, known := gracefulShutdown(mgr); known && grace >= 0 && o.StopTimeout >= grace {
		return nil, fmt.Errorf("ctrllease: Add: Options.StopTimeout %v is not below the Manager's GracefulShutdownTimeout %v: the Manager would stop waiting for the term's work before the Elector does", o.StopTimeout, grace)
	}
	if o.Namespace == "" {
		ns, err := podNamespace()
		if err != nil {
			return nil, fmt.Errorf("ctrllease: Add: Options.Namespace is empty, and the pod's namespace could not be read: %w", err)
		}
		o.Namespace = ns
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("ctrllease: Add: Options.Identity is empty, and the host name could not be read: %w", err)
		}
		o.Identity = host + "_" + string(uuid.NewUUID())
	}
	cs := o.Client
	if isNil(cs) {
		var err error
		if cs, err = kubernetes.NewForConfig(mgr.GetConfig()); err != nil {
			return nil, fmt.Errorf("ctrllease: Add: a clientset from the Manager's config: %w", err)
		}
	}
	e := &Elector{
		mgr:     mgr,
		opts:    o,
		cs:      cs,
		setup:   setup,
		subject: o.Namespace + "/" + o.Name,
	}
	e.log = mgr.GetLogger().WithName("ctrllease").WithValues("lease", e.subject, "identity", o.Identity)
	if err := mgr.Add(e); err != nil {
		return nil, fmt.Errorf("ctrllease: Add: %w", err)
	}
	return e, nil
}

// NeedLeaderElection is false: the Elector is the election.
func (e *Elector) NeedLeaderElection() bool { return false }

// Leading reports whether this replica leads: true from the grant until
// the term's work has returned.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Terms returns how many terms this replica has led.
func (e *Elector) Terms() int { return int(e.terms.Load()) }

// Identity returns this replica's identity in the Lease's record.
func (e *Elector) Identity() string { return e.opts.Identity }

// Err returns what the Elector's Start returned, or nil while it runs. A
// Manager logs the error of a runnable that returns after its stop began,
// and its Start does not return it: Err is where the error of a term whose
// work did not return within the stop timeout is read.
func (e *Elector) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Start campaigns and leads until ctx ends, term after term; the Manager
// calls it. It returns nil when ctx ends and the term's work returned; an
// error when a campaign meets a mistake, a setup or a term's runnable
// fails, or the work of the term did not return within the stop timeout.
func (e *Elector) Start(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("ctrllease: the Elector was started twice: add it to one Manager, once")
	}
	err := e.run(ctx)
	e.mu.Lock()
	e.err = err
	e.mu.Unlock()
	if err != nil {
		e.log.Error(err, "the elector stopped")
	}
	return err
}

func (e *Elector) run(ctx context.Context) error {
	for {
		e.log.V(1).Info("campaigning")
		lease, err := e.opts.Config.Lock(ctx, e.cs, e.opts.Namespace, e.opts.Name, e.opts.Identity)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while campaigning
			}
			return fmt.Errorf("ctrllease: campaign for %s: %w", e.subject, err)
		}
		if err := e.lead(ctx, lease); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// lead runs one term under lease until it is lost or ctx ends, and returns
// once its work returned and the lease was unlocked; or, if the work did not
// return within the stop timeout after ctx ended, at the timeout, leaving the
// lease to run out.
func (e *Elector) lead(ctx context.Context, lease *k8slease.Lease) error {
	number := int(e.terms.Add(1))
	e.leading.Store(true)
	log := e.log.WithValues("term", number, "token", lease.Token())
	log.Info("leading")
	t := newTerm(e.mgr, number, lease, e.subject)

	if err := e.callSetup(t, lease); err != nil {
		t.cache.end()
		e.leading.Store(false)
		e.unlock(lease, log)
		return fmt.Errorf("ctrllease: term %d of %s: setup: %w", number, e.subject, err)
	}

	lctx, stopLease := lease.Signal().Context(ctx)
	defer stopLease()
	tctx, cancel := context.WithCancelCause(lctx)
	defer cancel(nil)
	var failed error
	var failOnce sync.Once
	var done <-chan struct{}
	if lctx.Err() != nil {
		// Lost during setup, or stopped: nothing of the term starts.
		closed := make(chan struct{})
		close(closed)
		done = closed
	} else {
		done = t.start(tctx, func(err error) {
			if lctx.Err() != nil {
				// An error at the end of the term, such as a runnable
				// that returns ctx.Err(): the end, not a failure.
				log.V(1).Info("the term's work returned an error as it ended", "error", err.Error())
				return
			}
			failOnce.Do(func() {
				failed = err
				cancel(err)
			})
		})
	}

	// Wait for the term's work to return: it returns when tctx ends (the
	// loss, the Manager's stop, a runnable's failure), or before. Work that
	// returns while the lease lives is done: the lease is held until it ends.
	var stopping <-chan time.Time
	stuck := time.NewTimer(e.opts.StopTimeout)
	defer stuck.Stop()
	for waiting := true; waiting; {
		select {
		case <-stuck.C:
			if tctx.Err() != nil {
				log.Info("the term's work has not returned since the term ended: this replica waits for it before campaigning again", "running", t.stillRunning())
			}
			stuck.Reset(e.opts.StopTimeout)
		case <-done:
			if tctx.Err() == nil {
				<-tctx.Done()
			}
			waiting = false
		case <-ctx.Done():
			timer := time.NewTimer(e.opts.StopTimeout)
			defer timer.Stop()
			stopping = timer.C
			ctx = context.Background() // this case once
			log.Info("stopping: waiting for the term's work to return", "timeout", e.opts.StopTimeout)
		case <-stopping:
			lease.StopRenewing()
			err := fmt.Errorf("ctrllease: term %d of %s: the work did not return within the stop timeout %v, and the Lease is left to run out: %s",
				number, e.subject, e.opts.StopTimeout, t.stillRunning())
			go func() {
				<-done // Leading until the work returned, however late
				t.cache.end()
				e.leading.Store(false)
			}()
			return err
		}
	}
	t.cache.end()
	e.leading.Store(false)
	if err := lease.Signal().Err(); err != nil {
		log.Info("lost: the term's work returned", "cause", err.Error())
	}
	e.unlock(lease, log)
	if failed != nil {
		return fmt.Errorf("ctrllease: term %d of %s: %w", number, e.subject, failed)
	}
	return nil
}

// callSetup calls setup, and turns its panic into an error.
func (e *Elector) callSetup(t *term, lease *k8slease.Lease) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("setup panicked: %v", p)
		}
	}()
	return e.setup(t, lease)
}

// unlock releases lease, within the lease duration.
func (e *Elector) unlock(lease *k8slease.Lease, log logr.Logger) {
	d := e.opts.Config.LeaseDuration
	if d <= 0 {
		d = k8slease.DefaultLeaseDuration
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := lease.Unlock(ctx); err != nil {
		log.Error(err, "release")
		return
	}
	log.Info("released")
}

// leaderElection reports whether mgr was made with LeaderElection true,
// when mgr is controller-runtime's Manager, whose options it cannot
// otherwise tell: its resourceLock is set exactly then. known is false for
// a Manager of another type, or one whose layout changed (a test pins it).
func leaderElection(mgr manager.Manager) (on, known bool) {
	f, ok := managerField(mgr, "resourceLock")
	if !ok || f.Kind() != reflect.Interface {
		return false, false
	}
	return !f.IsNil(), true
}

// gracefulShutdown returns the graceful shutdown timeout of
// controller-runtime's Manager.
func gracefulShutdown(mgr manager.Manager) (d time.Duration, known bool) {
	f, ok := managerField(mgr, "gracefulShutdownTimeout")
	if !ok || f.Type() != reflect.TypeFor[time.Duration]() {
		return 0, false
	}
	return time.Duration(f.Int()), true
}

// managerField returns the field name of controller-runtime's Manager, read
// with reflection: both fields read are set by manager.New, never after.
func managerField(mgr manager.Manager, name string) (reflect.Value, bool) {
	v := reflect.ValueOf(mgr)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	if t := v.Elem().Type(); t.Name() != "controllerManager" || !strings.HasPrefix(t.PkgPath(), "sigs.k8s.io/controller-runtime/") {
		return reflect.Value{}, false
	}
	f := v.Elem().FieldByName(name)
	return f, f.IsValid()
}

// serviceAccountNamespace is where a pod's namespace is read.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func podNamespace() (string, error) {
	b, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// isNil reports whether v is nil, or an interface holding a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
