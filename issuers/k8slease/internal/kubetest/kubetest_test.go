package kubetest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

// waitTimeout bounds the waits of the tests; it guards against a hang, it is
// not a measure.
const waitTimeout = 60 * time.Second

// server is the apiserver the tests share; the tests that stop or restart
// one start their own.
var server *kubetest.Server

// TestMain runs the role of a child process, or starts the shared server,
// runs the tests and stops it. Before the stop, nothing but what
// IgnoreGoroutines names may be left running; after it, nothing at all, in
// this package, in client-go or in etcd.
func TestMain(m *testing.M) {
	kubetest.ChildMain(map[string]kubetest.Role{"writer": writer})
	var stop func() error
	var err error
	server, stop, err = kubetest.StartShared()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	// While the server runs, only its goroutines and client-go's idle
	// connections to it may be left; once stopped, nothing.
	if err := goleak.Find(kubetest.IgnoreGoroutines()...); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak, the shared server running:", err)
		code = 1
	}
	if err := stop(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// lease returns a Lease object named name in the namespace default.
func lease(name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](2),
		},
	}
}

// create creates the Lease name held by holder, failing the test on an error.
func create(t *testing.T, cs kubernetes.Interface, name, holder string) *coordinationv1.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	l, err := cs.CoordinationV1().Leases("default").Create(ctx, lease(name, holder), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Lease %s: %v", name, err)
	}
	return l
}

// get reads the Lease name, failing the test on an error.
func get(t *testing.T, cs kubernetes.Interface, name string) *coordinationv1.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	l, err := cs.CoordinationV1().Leases("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease %s: %v", name, err)
	}
	return l
}

func holder(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "<nil>") }

// A Lease written through client-go reads back; an Update with a stale
// resourceVersion is refused with 409, as only a real apiserver does.
func TestLease(t *testing.T) {
	cs := server.Clientset()
	created := create(t, cs, "lease", "a")
	got := get(t, cs, "lease")
	if holder(got) != "a" || got.ResourceVersion != created.ResourceVersion {
		t.Errorf("Get = holder %s, resourceVersion %s; want a, %s", holder(got), got.ResourceVersion, created.ResourceVersion)
	}
	got.Spec.HolderIdentity = ptr.To("b")
	updated, err := cs.CoordinationV1().Leases("default").Update(t.Context(), got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if updated.ResourceVersion == created.ResourceVersion {
		t.Errorf("Update kept resourceVersion %s", created.ResourceVersion)
	}
	created.Spec.HolderIdentity = ptr.To("c")
	_, err = cs.CoordinationV1().Leases("default").Update(t.Context(), created, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("Update with a stale resourceVersion = %v, want a conflict (409)", err)
	}
}

// ConfigVia reaches the apiserver through a proxy, verifying its
// certificate; a proxy that drops every byte makes a request time out, and
// once healed and its connections cut, requests go through again.
func TestConfigVia(t *testing.T) {
	px, err := faultnet.Listen(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	cs, err := kubernetes.NewForConfig(server.ConfigVia(px.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	create(t, cs, "via", "a")
	if got := get(t, cs, "via"); holder(got) != "a" {
		t.Errorf("through the proxy, holder = %s, want a", holder(got))
	}

	px.Drop(faultnet.Both)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err = cs.CoordinationV1().Leases("default").Get(ctx, "via", metav1.GetOptions{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get through a proxy that drops both ways = %v, want context.DeadlineExceeded", err)
	}

	px.Heal()
	px.Cut()
	get(t, cs, "via")
}

// A server of its own: the apiserver restarted keeps its port,
// certificate and data; etcd stopped makes writes fail and started again
// makes them work; a watch that names no timeout ends after
// MinRequestTimeout, not after the default half an hour.
func TestStopStart(t *testing.T) {
	s := kubetest.Options{MinRequestTimeout: time.Second}.Start(t)
	cs := s.Clientset()
	created := create(t, cs, "kept", "a")

	t.Run("restart apiserver", func(t *testing.T) {
		if err := s.RestartAPIServer(); err != nil {
			t.Fatal(err)
		}
		// The clientset made before the restart still trusts the
		// apiserver: the same certificate on the same port.
		got := get(t, cs, "kept")
		if holder(got) != "a" || got.ResourceVersion != created.ResourceVersion {
			t.Errorf("after a restart, Get = holder %s, resourceVersion %s; want a, %s",
				holder(got), got.ResourceVersion, created.ResourceVersion)
		}
	})

	t.Run("stop and start apiserver", func(t *testing.T) {
		if err := s.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		_, err := cs.CoordinationV1().Leases("default").Get(ctx, "kept", metav1.GetOptions{})
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Get while the apiserver is stopped = %v, want a refused connection", err)
		}
		if err := s.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		get(t, cs, "kept")
	})

	t.Run("stop and start etcd", func(t *testing.T) {
		if err := s.StopEtcd(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		_, err := cs.CoordinationV1().Leases("default").Create(ctx, lease("while-stopped", "a"), metav1.CreateOptions{})
		cancel()
		if err == nil {
			t.Error("Create while etcd is stopped succeeded")
		}
		if err := s.StartEtcd(); err != nil {
			t.Fatal(err)
		}
		// The apiserver reconnects by itself, within its etcd client's
		// backoff.
		started := time.Now()
		deadline := started.Add(waitTimeout)
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			_, err := cs.CoordinationV1().Leases("default").Create(ctx, lease("after-etcd", "a"), metav1.CreateOptions{})
			cancel()
			// AlreadyExists: an earlier try was applied, its answer cut by
			// its timeout on a loaded machine.
			if err == nil || apierrors.IsAlreadyExists(err) {
				t.Logf("writes succeed again %v after StartEtcd returned", time.Since(started).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Create after etcd started again: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got := get(t, cs, "kept"); holder(got) != "a" {
			t.Errorf("after etcd's restart, holder = %s, want a", holder(got))
		}
	})

	t.Run("goroutines after restarts", func(t *testing.T) {
		if err := goleak.Find(kubetest.IgnoreGoroutines()...); err != nil {
			t.Error(err)
		}
	})

	t.Run("watch ends", func(t *testing.T) {
		w, err := cs.CoordinationV1().Leases("default").Watch(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		timer := time.NewTimer(waitTimeout)
		defer timer.Stop()
		for {
			select {
			case _, ok := <-w.ResultChan():
				if !ok {
					return
				}
			case <-timer.C:
				t.Fatalf("a watch with --min-request-timeout=1 still open after %v", waitTimeout)
			}
		}
	})
}

// IgnoreGoroutines hides the server's goroutines, not a test's: a watch
// left open is reported until it is stopped.
func TestIgnoreGoroutinesKeepsWatches(t *testing.T) {
	cs := server.Clientset()
	w, err := cs.CoordinationV1().Leases("default").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = goleak.Find(kubetest.IgnoreGoroutines()...)
	w.Stop()
	if err == nil || !strings.Contains(err.Error(), "StreamWatcher") {
		t.Errorf("goleak.Find with a watch open = %v, want the watch's goroutine", err)
	}
}

// Without the binary and without the go command that builds it, a start
// fails at once and says what to do.
func TestStartWithoutGo(t *testing.T) {
	t.Setenv("KUBE_APISERVER", filepath.Join(t.TempDir(), "kube-apiserver"))
	t.Setenv("PATH", t.TempDir())
	s, _, err := kubetest.StartShared()
	if err == nil {
		t.Fatalf("StartShared = %v, nil; want an error", s)
	}
	for _, want := range []string{"kube-apiserver is not built", "go command", "make k8s-apiserver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("StartShared = %v, want an error that says %q", err, want)
		}
	}
}

// writer is the role of TestChild's child: it creates the Lease named by
// its first argument, says so, and for each line it reads writes that line
// as the holder and says so, until its input ends.
func writer(c *kubetest.Child) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	ctx := context.Background()
	leases := cs.CoordinationV1().Leases("default")
	l, err := leases.Create(ctx, lease(c.Args[0], "child"), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	c.Emit("created " + l.ResourceVersion)
	for {
		line, err := c.ReadLine()
		if err != nil {
			return nil
		}
		l.Spec.HolderIdentity = ptr.To(line)
		if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			return err
		}
		c.Emit("wrote " + line)
	}
}

// A child process reaches the apiserver with the configuration it was
// given, emits events stamped in its own process, reads lines, and stops
// and continues on SIGSTOP and SIGCONT.
func TestChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	before := time.Now()
	p := kubetest.StartChild(t, server.Config(), "writer", "child")
	ev, err := p.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	got := get(t, server.Clientset(), "child")
	if want := "created " + got.ResourceVersion; ev.Text != want {
		t.Errorf("event %q, want %q", ev.Text, want)
	}
	if ev.Time.Before(before.Round(0)) || ev.Time.After(after.Round(0)) {
		t.Errorf("event at %v, want between %v and %v", ev.Time, before, after)
	}

	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), 'T')
	if err := p.Send("b"); err != nil {
		t.Fatal(err)
	}
	// Stopped, the child cannot have written: the Lease is as it was.
	if got := get(t, server.Clientset(), "child"); holder(got) != "child" {
		t.Errorf("while the child is stopped, holder = %s, want child", holder(got))
	}
	if err := p.Continue(); err != nil {
		t.Fatal(err)
	}
	if ev, err := p.Next(ctx); err != nil || ev.Text != "wrote b" {
		t.Fatalf("after SIGCONT, Next = %q, %v; want \"wrote b\"", ev.Text, err)
	}
	if got := get(t, server.Clientset(), "child"); holder(got) != "b" {
		t.Errorf("holder = %s, want b", holder(got))
	}

	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Next(ctx); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Next after Kill = %v, want the child's exit by SIGKILL", err)
	}
}

// A child that ends by itself: Wait returns its exit status.
func TestChildWait(t *testing.T) {
	p := kubetest.StartChild(t, server.Config(), "writer", "child-wait")
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if _, err := p.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Errorf("Wait = %v, want nil: the writer ends when its input does", err)
	}
	p = kubetest.StartChild(t, server.Config(), "writer", "child-wait") // exists: Create fails
	if err := p.Wait(); err == nil {
		t.Error("Wait = nil for a child whose role failed")
	}
	if out := p.Output(); !strings.Contains(out, "kubetest: role writer:") || !strings.Contains(out, "already exists") {
		t.Errorf("Output() = %q, want the role's error", out)
	}
}

// waitState waits until process pid is in state (a letter of
// /proc/pid/stat: 'T' is stopped by a signal).
func waitState(t *testing.T, pid int, state byte) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i >= 0 && i+2 < len(b) && b[i+2] == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not in state %c after %v: %s", pid, state, waitTimeout, b)
		}
		time.Sleep(time.Millisecond)
	}
}
