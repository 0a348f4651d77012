package k8slease_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

// ns is the namespace of every Lease of the tests; each test names its own
// Leases.
const ns = "default"

// shared is the apiserver the tests share; a test that restarts the
// apiserver or stops its etcd starts one of its own.
var shared *kubetest.Server

func TestMain(m *testing.M) {
	kubetest.ChildMain(map[string]kubetest.Role{
		"holder": pausedHolder,
	})
	flag.Parse()
	// client-go logs each failed request through klog; the tests fail on
	// what matters and say so themselves.
	klog.SetLogger(logr.Discard())
	s, stop, err := kubetest.StartShared()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = s
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

// leaseName returns a name no other Lease of the test binary has.
func leaseName(t testing.TB) string { return kubetest.UniqueName(t) }

// clientset returns a clientset of cfg whose connections are its own: two
// clientsets of one rest.Config would share client-go's cached transport.
// A dial func that cfg sets is kept: it gives a transport of its own too.
func clientset(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext // a dial func of its own: no shared transport
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, ok := cs.CoordinationV1().RESTClient().(*rest.RESTClient); ok && c.Client != nil {
			c.Client.CloseIdleConnections()
		}
	})
	return cs
}

// granted is the result of a Lock and the time it returned.
type granted struct {
	l   *k8slease.Lease
	err error
	at  time.Time
}

// lockAsync starts cfg.Lock in a goroutine; its result arrives on the
// channel returned.
func lockAsync(ctx context.Context, cfg k8slease.Config, cs kubernetes.Interface, name, identity string) <-chan granted {
	c := make(chan granted, 1)
	go func() {
		l, err := cfg.Lock(ctx, cs, ns, name, identity)
		c <- granted{l, err, time.Now()}
	}()
	return c
}

// mustLock locks name for identity or fails the test; the lease is
// released when the test ends.
func mustLock(t testing.TB, cfg k8slease.Config, cs kubernetes.Interface, name, identity string) *k8slease.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := cfg.Lock(ctx, cs, ns, name, identity)
	if err != nil {
		t.Fatalf("Lock(%s, %s) = %v", name, identity, err)
	}
	t.Cleanup(func() { l.Unlock(context.Background()) })
	return l
}

// edit changes the Lease name as an operator would: read, change, Update
// with the resourceVersion read, again on a conflict. It returns when the
// apiserver answered.
func edit(t testing.TB, cs kubernetes.Interface, name string, change func(*coordinationv1.Lease)) {
	t.Helper()
	for {
		cur, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(cur)
		_, err = cs.CoordinationV1().Leases(ns).Update(t.Context(), cur, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
}

// waitLost waits for l's signal to be lost and returns its error.
func waitLost(t testing.TB, l *k8slease.Lease, within time.Duration) error {
	t.Helper()
	select {
	case <-l.Signal().Done():
		return l.Signal().Err()
	case <-time.After(within):
		t.Fatalf("the lease was not lost within %v", within)
		return nil
	}
}

// renewTime returns the renew time the Lease name records.
func renewTime(t testing.TB, cs kubernetes.Interface, name string) time.Time {
	t.Helper()
	cur, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Spec.RenewTime == nil {
		t.Fatalf("lease %s records no renew time", name)
	}
	return cur.Spec.RenewTime.Time
}

// holderOf returns the holder the Lease name records.
func holderOf(t testing.TB, cs kubernetes.Interface, name string) string {
	t.Helper()
	cur, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Spec.HolderIdentity == nil {
		return ""
	}
	return *cur.Spec.HolderIdentity
}

func isLost(err error, cause error) bool {
	return err != nil && errors.Is(err, cause)
}
