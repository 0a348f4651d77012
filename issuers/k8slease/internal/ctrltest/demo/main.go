// Command demo shows two replicas of a small controller-runtime operator
// whose leader-only work runs under a ctrllease lease.
//
// It starts a real kube-apiserver, on an etcd server in this process, on
// loopback ports, with its data in a temporary folder, and two replicas of
// the operator, each a process of its own (this program again). The
// operator reconciles ConfigMaps labelled app=orders: each reconcile is a
// batch of writes, one every 100 ms, through the term's client. Replica 1
// leads. An operator takes the Lease away for maintenance, as `kubectl edit
// lease` would: replica 1's reconcile is cut at once, with the cause, and
// the writes it still tries are refused without a request; the operator
// gives the Lease up, and replica 2, waiting, leads. Once replica 1's work
// has returned it campaigns again, in the same process; when the operator
// takes the Lease from replica 2 in turn, replica 1 leads again. The demo
// prints the timeline; both processes are alive at the end.
//
// The batch goes on after the cut, as a reconciler that does not check
// its context would: every write it tries is refused by the term's client,
// without a request, while the other replica leads. A lease warns; only
// such a gate, or a fencing token, keeps the old work's writes out.
//
// Run it with `make demo-ctrl`, or `go run ./demo` in this module. The
// first run builds kube-apiserver, which takes tens of minutes.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
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

const (
	namespace = "default"
	leaseName = "orders-operator"
	// steps and step make a reconcile's batch: longer than the operator's
	// maintenance, so the replica that lost the Lease is still winding its
	// batch down when the Lease comes free, and the other one leads.
	steps = 15
	step  = 100 * time.Millisecond
	// bound guards the demo's waits against a hang.
	bound = 2 * time.Minute
	// roleEnv carries a replica's name and the apiserver's configuration.
	roleEnv = "CTRLLEASE_DEMO_REPLICA"
)

func main() {
	klog.SetLogger(logr.Discard())
	ctrllog.SetLogger(logr.Discard())
	if v, ok := os.LookupEnv(roleEnv); ok {
		if err := replica(v); err != nil {
			fmt.Fprintln(os.Stderr, "demo replica:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// replicaConfig is what a replica process is given.
type replicaConfig struct {
	Name  string `json:"name"`
	Host  string `json:"host"`
	CA    []byte `json:"ca"`
	Token string `json:"token"`
}

// replica runs one replica of the operator until its standard input ends,
// printing an event a line: "UNIXNANO text".
func replica(env string) error {
	var rc replicaConfig
	if err := json.Unmarshal([]byte(env), &rc); err != nil {
		return err
	}
	cfg := &rest.Config{Host: rc.Host, BearerToken: rc.Token, TLSClientConfig: rest.TLSClientConfig{CAData: rc.CA}, QPS: 100, Burst: 200}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%d %s\n", time.Now().UnixNano(), fmt.Sprintf(format, args...))
	}
	mgr, err := manager.New(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}, Logger: logr.Discard()})
	if err != nil {
		return err
	}
	_, err = ctrllease.Add(mgr, ctrllease.Options{
		Namespace: namespace, Name: leaseName, Identity: rc.Name,
		Config: k8slease.Config{LeaseDuration: 2 * time.Second},
	}, func(m manager.Manager, lease *k8slease.Lease) error {
		say("leads: setup of a new term, fencing token %d", lease.Token())
		r := &batcher{client: m.GetClient(), say: say}
		return ctrl.NewControllerManagedBy(m).
			Named("orders").
			For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetLabels()["app"] == "orders"
			}))).
			Complete(r)
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin) // the parent is gone, or closed our input
		cancel()
	}()
	say("up: campaigning")
	return mgr.Start(ctx)
}

// batcher reconciles an order: a batch of writes, one a step, through the
// term's client. It checks its context only between batches, as a
// reconciler in the middle of a batch often does not: the term's client
// refuses its writes once the lease is lost.
type batcher struct {
	client client.Client
	say    func(string, ...any)
}

func (b *batcher) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if ctx.Err() != nil {
		b.say("reconcile of %s cut before it began, cause: %v", req.Name, context.Cause(ctx))
		return reconcile.Result{}, nil
	}
	refused, cut := 0, false
	for i := 1; i <= steps; i++ {
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"step":"%d"}}}`, i))
		err := b.client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}, patch)
		if err == nil && i == 1 {
			b.say("reconciles %s: batch of %d writes begun", req.Name, steps)
		}
		if ctx.Err() != nil && !cut {
			cut = true
			b.say("reconcile of %s cut at write %d, cause: %v", req.Name, i, context.Cause(ctx))
		}
		if errors.As(err, new(*lost.Error)) {
			refused++
		}
		time.Sleep(step)
	}
	if refused > 0 {
		b.say("reconcile of %s returned: %d writes refused by the term's client, none sent", req.Name, refused)
	}
	return reconcile.Result{}, nil
}

// timeline prints events with the time since the demo began.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
	lines []string
	more  chan struct{}
	ended bool // the story is told: later events are not printed
}

func (tl *timeline) add(at time.Time, who, text string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.ended {
		return
	}
	line := fmt.Sprintf("%+8.3fs  %-9s  %s", at.Sub(tl.start).Seconds(), who, text)
	fmt.Fprintln(tl.out, line)
	tl.lines = append(tl.lines, who+" "+text)
	select {
	case tl.more <- struct{}{}:
	default:
	}
}

// wait waits for a line of who that contains text, after the first from.
func (tl *timeline) wait(from int, who, text string) (int, error) {
	deadline := time.After(bound)
	for {
		tl.mu.Lock()
		for i := from; i < len(tl.lines); i++ {
			if strings.HasPrefix(tl.lines[i], who+" ") && strings.Contains(tl.lines[i], text) {
				tl.mu.Unlock()
				return i + 1, nil
			}
		}
		tl.mu.Unlock()
		select {
		case <-tl.more:
		case <-deadline:
			return 0, fmt.Errorf("%s never said %q within %v", who, text, bound)
		}
	}
}

func (tl *timeline) len() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.lines)
}

// process is a replica's process.
type process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

func startReplica(tl *timeline, s *kubetest.Server, name string) (*process, error) {
	cfg := s.Config()
	env, err := json.Marshal(replicaConfig{Name: name, Host: cfg.Host, CA: cfg.CAData, Token: cfg.BearerToken})
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ns, text, ok := strings.Cut(sc.Text(), " ")
			n, err := strconv.ParseInt(ns, 10, 64)
			if !ok || err != nil {
				fmt.Fprintln(os.Stderr, name+":", sc.Text())
				continue
			}
			tl.add(time.Unix(0, n), name, text)
		}
		cmd.Wait()
	}()
	return p, nil
}

// alive reports whether p's process still runs.
func (p *process) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return p.cmd.Process.Signal(syscall.Signal(0)) == nil
	}
}

func (p *process) stop() {
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func run(out io.Writer) error {
	fmt.Fprintln(out, "starting etcd and kube-apiserver on loopback ports…")
	s, stopServer, err := kubetest.StartShared()
	if err != nil {
		return err
	}
	defer stopServer()
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		return err
	}
	tl := &timeline{out: out, start: time.Now(), more: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()

	// Orders arrive every 300 ms for the whole demo.
	orders := make(chan struct{})
	go func() {
		defer close(orders)
		for i := 1; ctx.Err() == nil; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("order-%d", i), Labels: map[string]string{"app": "orders"}}}
			cs.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	defer func() { cancel(); <-orders }()

	r1, err := startReplica(tl, s, "replica-1")
	if err != nil {
		return err
	}
	defer r1.stop()
	at, err := tl.wait(0, "replica-1", "batch of")
	if err != nil {
		return err
	}
	r2, err := startReplica(tl, s, "replica-2")
	if err != nil {
		return err
	}
	defer r2.stop()
	if _, err := tl.wait(at, "replica-2", "up: campaigning"); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // replica-2 waits on the Lease
	// The maintenance begins as a batch of replica-1's begins, so that the
	// batch outlasts it (see steps): begun at a random write, it could end
	// before the Lease comes free, and replica-1 would campaign again and
	// race replica-2 for it. The second maintenance begins as replica-2's
	// first batch does.
	if at, err = tl.wait(tl.len(), "replica-1", "batch of"); err != nil {
		return err
	}

	maintenance := func(from string) error {
		n := tl.len()
		if err := setHolder(ctx, cs, "maintenance"); err != nil {
			return err
		}
		tl.add(time.Now(), "operator", `set the Lease's holderIdentity to "maintenance"`)
		if _, err := tl.wait(n, from, "cut"); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond)
		if err := setHolder(ctx, cs, ""); err != nil {
			return err
		}
		tl.add(time.Now(), "operator", "maintenance over: cleared the Lease's holder")
		return nil
	}
	if err := maintenance("replica-1"); err != nil {
		return err
	}
	if at, err = tl.wait(at, "replica-2", "leads:"); err != nil {
		return err
	}
	if at, err = tl.wait(at, "replica-2", "batch of"); err != nil {
		return err
	}
	if err := maintenance("replica-2"); err != nil {
		return err
	}
	if at, err = tl.wait(at, "replica-1", "leads:"); err != nil {
		return err
	}
	if _, err = tl.wait(at, "replica-1", "batch of"); err != nil {
		return err
	}
	tl.mu.Lock()
	tl.ended = true
	tl.mu.Unlock()
	fmt.Fprintf(out, "end: replica-1 alive %v, replica-2 alive %v\n", r1.alive(), r2.alive())
	if !r1.alive() || !r2.alive() {
		return fmt.Errorf("a replica's process ended")
	}
	return nil
}

// setHolder writes holder into the Lease's record, as an operator would,
// renewed now.
func setHolder(ctx context.Context, cs kubernetes.Interface, holder string) error {
	leases := cs.CoordinationV1().Leases(namespace)
	for {
		l, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		if holder == "" {
			l.Spec.HolderIdentity = nil
		} else {
			l.Spec.HolderIdentity = &holder
		}
		l.Spec.RenewTime = &now
		l.Spec.AcquireTime = &now
		if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
}
