// Command demo shows two holders contending for one Kubernetes Lease.
//
// It starts a real kube-apiserver, on an etcd server in this process, on
// loopback ports, with its data in a temporary folder. Holder A takes the
// Lease and writes batches to a warehouse that checks fencing tokens;
// holder B waits for the Lease. An operator takes the Lease away from A, as
// `kubectl edit lease` would: A's signal is lost with the cause, at once,
// not at its next renewal; the operator gives the Lease up, B takes it with
// a larger token and goes on, and a write of A's that was still on its way
// is refused by the warehouse because its token is older than B's. The demo
// prints the timeline and removes everything it made.
//
// Run it with `make demo-k8s`, or `go run ./demo` in this module. The first
// run builds kube-apiserver, which takes tens of minutes (see the README).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
	"github.com/zukhruf/lease/lost"
)

const (
	namespace = "default"
	leaseName = "orders"
	// pause is how long a holder rests between batches; the loss ends the
	// rest early.
	pause = 100 * time.Millisecond
	// bound guards the demo's waits against a hang.
	bound = time.Minute
)

func main() {
	klog.SetLogger(logr.Discard())
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// timeline prints events with the time since the demo began.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (tl *timeline) say(who, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	ms := time.Since(tl.start).Milliseconds()
	fmt.Fprintf(tl.out, "%6d ms  %-9s %s\n", ms, who, fmt.Sprintf(format, args...))
}

// warehouse stores batches and refuses any write whose fencing token is
// older than the newest it has accepted: the check ADR 0001 asks of a
// resource, since a signal can warn a holder but not recall a write already
// sent.
type warehouse struct {
	mu      sync.Mutex
	highest int64
	stored  []string
}

func (w *warehouse) write(token int64, batch string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if token < w.highest {
		return fmt.Errorf("fencing token %d is older than %d", token, w.highest)
	}
	w.highest = token
	w.stored = append(w.stored, batch)
	return nil
}

// setHolder writes holder into the Lease's record as an operator's edit
// would: read, change, Update with the resourceVersion read.
func setHolder(ctx context.Context, cs kubernetes.Interface, holder string) error {
	for {
		l, err := cs.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = &holder
		if _, err = cs.CoordinationV1().Leases(namespace).Update(ctx, l, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
}

func run(out io.Writer) error {
	fmt.Fprintf(out, "two holders contend for the Lease %s/%s; times since the demo began\n\n", namespace, leaseName)
	start := time.Now()
	srv, stop, err := kubetest.StartShared()
	if err != nil {
		return err
	}
	defer stop()
	tl := &timeline{out: out, start: time.Now()}
	tl.say("apiserver", "kube-apiserver ready on %s after %.1f s, etcd in this process", srv.Addr(), time.Since(start).Seconds())

	// Each party has its own clientset, as it would in its own process.
	clientset := func() (kubernetes.Interface, error) { return kubernetes.NewForConfig(srv.Config()) }
	ca, err := clientset()
	if err != nil {
		return err
	}
	cb, err := clientset()
	if err != nil {
		return err
	}
	op, err := clientset()
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	wh := &warehouse{}
	cfg := k8slease.Config{LeaseDuration: 5 * time.Second}

	a, err := cfg.Lock(ctx, ca, namespace, leaseName, "node-a")
	if err != nil {
		return err
	}
	defer a.Unlock(ctx)
	tl.say("holder A", "holds %s/%s as node-a: fencing token %d", namespace, leaseName, a.Token())

	type locked struct {
		l   *k8slease.Lease
		err error
	}
	bc := make(chan locked, 1)
	tl.say("holder B", "asks for %s/%s as node-b and waits", namespace, leaseName)
	go func() {
		l, err := cfg.Lock(ctx, cb, namespace, leaseName, "node-b")
		bc <- locked{l, err}
	}()

	// Holder A works until its lease is lost; after its third batch, the
	// operator takes the Lease away.
	sig := a.Signal()
	var late string // the write of A's that arrives after B's
	var tookAt time.Time
	for n := 1; ; n++ {
		if err := sig.Err(); err != nil {
			tl.say("holder A", "told before batch %d, %.1f ms after the operator's write returned: %v",
				n, float64(time.Since(tookAt).Microseconds())/1000, err)
			var le *lost.Error
			if !errors.As(err, &le) {
				return fmt.Errorf("holder A: the loss %v is not a *lost.Error", err)
			}
			tl.say("holder A", "stops: subject %s, errors.Is(err, k8slease.ErrTakenOver) = %v",
				le.Subject(), errors.Is(err, k8slease.ErrTakenOver))
			late = fmt.Sprintf("batch %d", n-1) // a retry A's client sent before the loss
			break
		}
		batch := fmt.Sprintf("batch %d", n)
		if err := wh.write(a.Token(), batch); err != nil {
			return fmt.Errorf("holder A: %w", err)
		}
		tl.say("holder A", "%s stored with fencing token %d", batch, a.Token())
		if n == 3 && tookAt.IsZero() {
			if err := setHolder(ctx, op, "maintenance"); err != nil {
				return err
			}
			tookAt = time.Now()
			tl.say("operator", "set the Lease's holderIdentity to \"maintenance\"")
		}
		select {
		case <-sig.Done():
		case <-time.After(pause):
		case <-ctx.Done():
			return errors.New("holder A was never told that the Lease was taken away")
		}
	}

	// The operator gives the Lease up, as client-go's release does: no
	// holder; a waiting candidate takes it at once.
	if err := setHolder(ctx, op, ""); err != nil {
		return err
	}
	tl.say("operator", "set holderIdentity to \"\": the Lease is free")

	var b *k8slease.Lease
	select {
	case r := <-bc:
		if r.err != nil {
			return r.err
		}
		b = r.l
	case <-ctx.Done():
		return errors.New("holder B never got the Lease")
	}
	tl.say("holder B", "holds %s/%s as node-b: fencing token %d", namespace, leaseName, b.Token())
	for n := 4; n <= 6; n++ {
		if err := b.Signal().Err(); err != nil {
			return fmt.Errorf("holder B: %w", err)
		}
		batch := fmt.Sprintf("batch %d", n)
		if err := wh.write(b.Token(), batch); err != nil {
			return fmt.Errorf("holder B: %w", err)
		}
		tl.say("holder B", "%s stored with fencing token %d", batch, b.Token())
		if n == 4 {
			// A retry of A's, sent before A was told, arrives only now.
			if err := wh.write(a.Token(), late); err != nil {
				tl.say("warehouse", "refused a late retry of A's %s: %v", late, err)
			} else {
				return errors.New("the warehouse took a write from a holder that lost its lease")
			}
		}
	}
	if err := b.Unlock(ctx); err != nil {
		return err
	}
	tl.say("holder B", "unlocked; its signal after the release: Err() = %v", b.Signal().Err())
	rec, err := op.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	tl.say("apiserver", "the Lease now records %s", record(rec))

	fmt.Fprintf(out, "\nfencing tokens: A %d, B %d; the warehouse holds %v\n", a.Token(), b.Token(), wh.stored)
	return nil
}

func record(l *coordinationv1.Lease) string {
	h := "<none>"
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		h = *l.Spec.HolderIdentity
	}
	return fmt.Sprintf("holderIdentity %s, leaseDurationSeconds %d, leaseTransitions %d", h, *l.Spec.LeaseDurationSeconds, *l.Spec.LeaseTransitions)
}
