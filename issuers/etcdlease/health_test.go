package etcdlease_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/lost"
)

// TestObserverEvents: a lease's observer is told of its grant, the
// session's renewals in order, and its release; another's, of its grant and
// its loss when an operator deletes its key, pushed by the watch.
func TestObserverEvents(t *testing.T) {
	srv, op := startEtcdWithOp(t)
	s := newSession(t, srv)
	rec := &healthrec.Recorder{}
	l := mustLock(t, s, "orders", etcdlease.WithObserver(rec))
	rec.WaitFor(t, health.Renewed, 2)
	h := l.Health()
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	all := rec.Events()
	renewals, err := healthrec.Renewals(all)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, e := range renewals {
		if !e.Sent.After(last) || e.Margin <= 0 {
			t.Errorf("renewed: sent %v after %v, margin %v; want later sends and a margin > 0", e.Sent, last, e.Margin)
		}
		last = e.Sent
	}
	if g := all[0]; g.Subject != "orders" || g.Token != l.Token() || g.Issuer != "etcdlease" || g.Wait <= 0 {
		t.Errorf("granted = %+v, want subject orders, token %d, a wait", g, l.Token())
	}
	if h.Deadline.IsZero() || !h.Deadline.After(h.Renewed) || h.Margin <= 0 {
		t.Errorf("Health() = %+v, want a deadline after the renewal and a margin > 0", h)
	}

	rec2 := &healthrec.Recorder{}
	l2 := mustLock(t, s, "invoices", etcdlease.WithObserver(rec2))
	deleteKey(t, op, l2.Key())
	waitLost(t, l2.Signal(), hang)
	all = rec2.WaitFor(t, health.Lost, 1)
	loss := all[len(all)-1]
	var le *lost.Error
	if !errors.As(loss.Err, &le) || loss.Err != l2.Signal().Err() || loss.Via != health.Push || !errors.Is(loss.Err, etcdlease.ErrKeyDeleted) {
		t.Errorf("lost = %v via %v, want the signal's ErrKeyDeleted via push", loss.Err, loss.Via)
	}
	for _, e := range all[1 : len(all)-1] {
		if e.Kind == health.Lost || e.Kind == health.Released || e.Kind == health.Granted {
			t.Errorf("events = %v: %v before the loss", healthrec.Kinds(all), e.Kind)
		}
	}
	l2.Unlock(t.Context())
	if got := len(rec2.Events()); got != len(all) {
		t.Errorf("the Unlock of a lost lease reported %d events more", got-len(all))
	}
}

// TestObserverLostBySessionRevoked: a session revoked by an operator loses
// its leases, and the observer is told once.
func TestObserverLostBySessionRevoked(t *testing.T) {
	srv, op := startEtcdWithOp(t)
	s := newSession(t, srv)
	rec := &healthrec.Recorder{}
	l := mustLock(t, s, "orders", etcdlease.WithObserver(rec))
	revoke(t, op, s)
	waitLost(t, l.Signal(), hang)
	all := rec.WaitFor(t, health.Lost, 1)
	if n := len(all); all[0].Kind != health.Granted || all[n-1].Kind != health.Lost || all[n-1].Err != l.Signal().Err() {
		t.Errorf("events = %v, want granted first, the loss last with the signal's error", healthrec.Kinds(all))
	}
}

// TestUnlockCancelledContext: an Unlock whose context has ended still
// sends its release, and says it did: nil, and a waiting Lock of another
// session is granted at once, not at the end of the holder's session.
func TestUnlockCancelledContext(t *testing.T) {
	srv := startEtcd(t)
	for _, name := range []string{"cancelled", "expired"} {
		t.Run(name, func(t *testing.T) {
			a := etcdlease.NewLocker(newLongSession(t, srv))
			b := etcdlease.NewLocker(newLongSession(t, srv))
			l, err := a.Lock(t.Context(), name)
			if err != nil {
				t.Fatal(err)
			}
			type grant struct {
				l  *etcdlease.Lease
				at time.Time
			}
			got := make(chan grant, 1)
			go func() {
				lb, err := b.Lock(t.Context(), name)
				if err != nil {
					t.Error(err)
					close(got)
					return
				}
				got <- grant{lb.(*etcdlease.Lease), time.Now()}
			}()
			time.Sleep(100 * time.Millisecond) // B waits
			var ctx context.Context
			var cancel context.CancelFunc
			if name == "cancelled" {
				ctx, cancel = context.WithCancel(context.Background())
			} else {
				ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			}
			cancel()
			start := time.Now()
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock(%s context) = %v, want nil: the release went through", name, err)
			}
			g, ok := <-got
			if !ok {
				return
			}
			defer g.l.Unlock(t.Context())
			took := g.at.Sub(start)
			t.Logf("Unlock(%s context) → waiting Lock granted in %v", name, took)
			if took >= longTTL*time.Second/2 {
				t.Errorf("the waiting Lock was granted %v after the Unlock: not by the release", took)
			}
		})
	}
}

// TestObserverLostAfterEverySessionLease: when the session of three observed
// leases ends, every one of them is lost before any observer is told Lost.
func TestObserverLostAfterEverySessionLease(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	s := newSession(t, srv)
	var (
		mu     sync.Mutex
		leases []*etcdlease.Lease
		live   []string // a lease still live when a Lost was told
		told   = make(chan struct{}, 3)
	)
	obs := health.ObserverFunc(func(e health.Event) {
		if e.Kind != health.Lost {
			return
		}
		mu.Lock()
		for _, l := range leases {
			if l.Signal().Err() == nil {
				live = append(live, e.Subject+" told while "+l.Key()+" was live")
			}
		}
		mu.Unlock()
		told <- struct{}{}
	})
	for _, name := range []string{"/locks/a", "/locks/b", "/locks/c"} {
		l, err := etcdlease.StartObserved(t.Context(), s, name, obs)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		leases = append(leases, l)
		mu.Unlock()
	}
	revoke(t, op, s)
	for range 3 {
		waitFor(t, told, hang, "a Lost event")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range live {
		t.Errorf("Lost %s", m)
	}
}

// TestObserverReleasedAfterAtRisk: an AtRisk being told as the lease is
// released is told before the Released, never after it.
func TestObserverReleasedAfterAtRisk(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	s := newSession(t, srv)
	var (
		mu    sync.Mutex
		kinds []health.Kind
	)
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	obs := health.ObserverFunc(func(e health.Event) {
		if e.Kind == health.AtRisk {
			once.Do(func() { close(entered); <-proceed })
		}
		mu.Lock()
		kinds = append(kinds, e.Kind)
		mu.Unlock()
	})
	l := mustLock(t, s, lockName, etcdlease.WithObserver(obs))
	waitRenewed(t, l)
	warned := make(chan struct{})
	go func() {
		defer close(warned)
		for {
			etcdlease.WarnAtRisk(l) // told nothing if a renewal moved the deadline meanwhile
			select {
			case <-entered:
				return
			default:
			}
		}
	}()
	waitFor(t, entered, hang, "the AtRisk event")
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(t.Context()) }()
	time.Sleep(100 * time.Millisecond) // room for a Released told out of turn
	close(proceed)
	<-warned
	if err := waitFor(t, unlocked, hang, "Unlock"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(kinds, health.Released); i < 0 || i != len(kinds)-1 || !slices.Contains(kinds[:i], health.AtRisk) {
		t.Errorf("events = %v, want the AtRisk before the Released, and the Released last", kinds)
	}
}
