package ctrllease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"net/http"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/zukhruf/lease/issuers/k8slease"
)

// term is the Manager a Setup is given: the Manager's, but for the work it
// registers, which belongs to one term of leadership.
type term struct {
	manager.Manager // the Manager the Elector was added to

	number int
	lease  *k8slease.Lease
	client client.Client // the Manager's, gated by the lease
	cache  *termCache

	mu        sync.Mutex
	sealed    bool // setup returned: the term takes no more work
	runnables []manager.Runnable
	running   map[int]string // what has not returned yet, by index
}

func newTerm(mgr manager.Manager, number int, lease *k8slease.Lease, subject string) *term {
	t := &term{Manager: mgr, number: number, lease: lease}
	t.client = gateLease(mgr.GetClient(), lease, subject)
	t.cache = &termCache{Cache: mgr.GetCache()}
	return t
}

// Add registers r as work of the term, started when setup returns.
func (t *term) Add(r manager.Runnable) error {
	if isNil(r) {
		return errors.New("ctrllease: Add called with a nil runnable")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sealed {
		return fmt.Errorf("ctrllease: Add on the Manager of term %d after its setup returned: a term's work is registered by its setup", t.number)
	}
	guardReconciler(r)
	t.runnables = append(t.runnables, r)
	return nil
}

// guardReconciler puts a guard in front of the reconciler of r, if r is a
// controller of controller-runtime on reconcile.Request: its workers take
// an item from the queue without looking at their context, so after the
// loss a worker may still call Reconcile, with a context already done.
// The guard returns at once then: nothing of a term starts after its end.
// (Controllers on another request type are left as they are; their
// Reconcile gets the done context.)
func guardReconciler(r manager.Runnable) {
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	f := v.Elem().FieldByName("Do")
	if !f.IsValid() || !f.CanSet() || f.Type() != reflect.TypeFor[reconcile.Reconciler]() || f.IsNil() {
		return
	}
	inner := f.Interface().(reconcile.Reconciler)
	if _, ok := inner.(guard); ok {
		return
	}
	f.Set(reflect.ValueOf(reconcile.Reconciler(guard{inner})))
}

// guard is a reconciler that does not call the one it guards once its
// context is done.
type guard struct{ r reconcile.Reconciler }

func (g guard) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if ctx.Err() != nil {
		return reconcile.Result{}, nil
	}
	return g.r.Reconcile(ctx, req)
}

// GetFieldIndexer refuses: a term registers no field index (see
// termCache.IndexField).
func (t *term) GetFieldIndexer() client.FieldIndexer { return t.cache }

// GetWebhookServer returns the Manager's webhook server, whose Register
// panics: webhooks are the Manager's, registered once, before Start. The
// Manager's server is reached only by its other methods: a Manager makes
// one, and runs it, the first time it is asked for it.
func (t *term) GetWebhookServer() webhook.Server { return termWebhooks{t.Manager} }

// termWebhooks is the Manager's webhook server, refusing registrations.
type termWebhooks struct{ mgr manager.Manager }

func (termWebhooks) Register(path string, _ http.Handler) {
	panic(fmt.Sprintf("ctrllease: a webhook (%s) registered by a term's setup: register webhooks on the Manager, once, before Start; a second term would register the path again", path))
}

func (w termWebhooks) NeedLeaderElection() bool { return w.mgr.GetWebhookServer().NeedLeaderElection() }

func (w termWebhooks) Start(ctx context.Context) error { return w.mgr.GetWebhookServer().Start(ctx) }

func (w termWebhooks) StartedChecker() healthz.Checker {
	return w.mgr.GetWebhookServer().StartedChecker()
}

func (w termWebhooks) WebhookMux() *http.ServeMux { return w.mgr.GetWebhookServer().WebhookMux() }

// Elected is closed: the term's work runs only while this replica leads.
func (t *term) Elected() <-chan struct{} { return closed }

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Start refuses: the Elector starts a term's work.
func (t *term) Start(context.Context) error {
	return errors.New("ctrllease: Start called on the Manager of a term: the Elector starts the work a setup registers")
}

// GetClient returns the Manager's client, whose writes fail once the term's
// lease is lost.
func (t *term) GetClient() client.Client { return t.client }

// GetCache returns the Manager's cache, which takes off the shared
// informers, at the end of the term, the handlers the term put on them.
func (t *term) GetCache() cache.Cache { return t.cache }

// GetControllerOptions returns the Manager's, with the check of unique
// controller names skipped: each term builds its controllers again under
// the names of the last term's.
func (t *term) GetControllerOptions() config.Controller {
	o := t.Manager.GetControllerOptions()
	skip := true
	o.SkipNameValidation = &skip
	return o
}

// start seals the term and starts its work with ctx; the channel it returns
// is closed once all of it has returned. A runnable that fails calls fail
// with its error, named.
func (t *term) start(ctx context.Context, fail func(error)) <-chan struct{} {
	t.mu.Lock()
	t.sealed = true
	rs := slices.Clone(t.runnables)
	t.running = make(map[int]string, len(rs))
	for i, r := range rs {
		t.running[i] = describe(r)
	}
	t.mu.Unlock()

	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			err := r.Start(ctx)
			t.mu.Lock()
			name := t.running[i]
			delete(t.running, i)
			t.mu.Unlock()
			if err != nil {
				fail(fmt.Errorf("%s: %w", name, err))
			}
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

// stillRunning names the work of the term that has not returned.
func (t *term) stillRunning() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.running))
	for _, n := range t.running {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// describe names a runnable: a controller by its name, anything else by
// its type.
func describe(r manager.Runnable) string {
	v := reflect.ValueOf(r)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			break
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		if f := v.FieldByName("Name"); f.IsValid() && f.Kind() == reflect.String && f.CanInterface() && f.String() != "" {
			return fmt.Sprintf("controller %q", f.String())
		}
	}
	return fmt.Sprintf("runnable %T", r)
}

// termCache is the Manager's cache, but for the event handlers added
// through the informers it returns, which it keeps to take them off at the
// end of the term: controller-runtime's sources never take theirs off, and
// a shared informer would otherwise call the handlers of every past term.
type termCache struct {
	cache.Cache

	mu       sync.Mutex
	ended    bool
	handlers []registration
}

type registration struct {
	informer cache.Informer
	handle   toolscache.ResourceEventHandlerRegistration
}

func (c *termCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return &termInformer{Informer: i, cache: c}, nil
}

func (c *termCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	return &termInformer{Informer: i, cache: c}, nil
}

// IndexField refuses: an index added by one term would be added again by
// the next, which the informer refuses.
func (c *termCache) IndexField(_ context.Context, obj client.Object, field string, _ client.IndexerFunc) error {
	return fmt.Errorf("ctrllease: IndexField(%T, %q) called by a term's setup: register field indexes on the Manager, once, before Start", obj, field)
}

// Start refuses: the Manager runs its cache.
func (c *termCache) Start(context.Context) error {
	return errors.New("ctrllease: Start called on the cache of a term: the Manager runs its cache")
}

// keep records a handler added to i, or takes it off at once if the term
// has ended.
func (c *termCache) keep(i cache.Informer, h toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err != nil {
		return h, err
	}
	c.mu.Lock()
	ended := c.ended
	if !ended {
		c.handlers = append(c.handlers, registration{i, h})
	}
	c.mu.Unlock()
	if ended {
		_ = i.RemoveEventHandler(h)
		return nil, errors.New("ctrllease: an event handler added after its term ended")
	}
	return h, nil
}

// end takes off every handler of the term; later ones are refused.
func (c *termCache) end() {
	c.mu.Lock()
	c.ended = true
	hs := c.handlers
	c.handlers = nil
	c.mu.Unlock()
	for _, r := range hs {
		_ = r.informer.RemoveEventHandler(r.handle) // idempotent; an error means the informer stopped
	}
}

// termInformer is a shared informer whose handlers its term's cache keeps.
type termInformer struct {
	cache.Informer
	cache *termCache
}

func (i *termInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	r, err := i.Informer.AddEventHandler(h)
	return i.cache.keep(i.Informer, r, err)
}

func (i *termInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	r, err := i.Informer.AddEventHandlerWithResyncPeriod(h, p)
	return i.cache.keep(i.Informer, r, err)
}

func (i *termInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	r, err := i.Informer.AddEventHandlerWithOptions(h, o)
	return i.cache.keep(i.Informer, r, err)
}
