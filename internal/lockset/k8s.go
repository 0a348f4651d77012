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
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/zukhruf/lease/internal/lockset/history"
	"github.com/zukhruf/lease/issuers/k8slease"
)

// The Kubernetes server is the command lockset-kube of the k8slease module
// (etcd and kube-apiserver, by its internal package kubetest), built by
// make into the file LOCKSET_KUBE names. It writes the clients'
// configuration into a file, which the clients read from the file
// LOCKSET_KUBECONFIG names.
const (
	kubeServerEnv = "LOCKSET_KUBE"
	kubeConfigEnv = "LOCKSET_KUBECONFIG"
)

// kubeNamespace holds the Lease objects of the run.
const kubeNamespace = "default"

// kubeClientConfig is what lockset-kube writes.
type kubeClientConfig struct {
	Addr  string `json:"addr"`
	CA    []byte `json:"ca"`
	Token string `json:"token"`
}

// startKube starts lockset-kube once: a kill of the server is one of its
// apiserver (SIGUSR1, then SIGUSR2 to start it again), since etcd's data
// lives in its process.
func (r *runner) startKube() (string, error) {
	bin := os.Getenv(kubeServerEnv)
	if bin == "" {
		return "", fmt.Errorf("%s is not set: build issuers/k8slease/internal/kubetest/cmd/lockset-kube and name it there (make lockset ISSUER=k8s does)", kubeServerEnv)
	}
	config := filepath.Join(r.dir, "kubeconfig.json")
	cmd := exec.Command(bin, "-config", config)
	cmd.Stderr = os.Stderr
	// A group of its own, with the apiserver: a pause stops both.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	p := &proc{name: "server", cmd: cmd, done: make(chan struct{}), group: true}
	go func() { cmd.Wait(); close(p.done) }()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		p.signal(syscall.SIGKILL)
		return "", errors.New("lockset-kube exited before it served")
	}
	endpoint, ok := strings.CutPrefix(sc.Text(), "endpoint ")
	if !ok {
		p.signal(syscall.SIGKILL)
		return "", fmt.Errorf("lockset-kube said %q", sc.Text())
	}
	go io.Copy(io.Discard, stdout)
	// The clients inherit the environment.
	os.Setenv(kubeConfigEnv, config)
	r.mu.Lock()
	r.server = p
	r.mu.Unlock()
	return endpoint, nil
}

// kubeClientset returns a clientset of the server through addr, a proxy's.
func kubeClientset(addr string, timeout time.Duration) (*kubernetes.Clientset, error) {
	b, err := os.ReadFile(os.Getenv(kubeConfigEnv))
	if err != nil {
		return nil, fmt.Errorf("the server's configuration: %w", err)
	}
	var c kubeClientConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(&rest.Config{
		Host:            "https://" + addr,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CA},
		QPS:             1000,
		Burst:           2000,
		Timeout:         timeout,
	})
}

// kubeDeleteLease deletes lock's Lease object, as an operator's mistake
// would; see runner.eraseLock.
func (r *runner) kubeDeleteLease(ctx context.Context, lock string) (int64, bool) {
	b, err := os.ReadFile(os.Getenv(kubeConfigEnv))
	if err != nil {
		return 0, false
	}
	var c kubeClientConfig
	if json.Unmarshal(b, &c) != nil {
		return 0, false
	}
	cs, err := kubeClientset(c.Addr, r.ttl)
	if err != nil {
		return 0, false
	}
	leases := cs.CoordinationV1().Leases(kubeNamespace)
	if _, err := leases.Get(ctx, kubeLeaseName(lock), metav1.GetOptions{}); err != nil {
		return 0, false
	}
	at := history.Now()
	return at, leases.Delete(ctx, kubeLeaseName(lock), metav1.DeleteOptions{}) == nil
}

func kubeLeaseName(lock string) string { return "lockset-" + lock }

// kubeLocker takes the lock with k8slease (side lease) or client-go's
// LeaderElector (side peer), with client-go's recommended proportions
// scaled to the TTL, as its leader elections use it.
type kubeLocker struct {
	cfg      clientConfig
	cs       *kubernetes.Clientset
	acquires int
}

func newKubeLocker(c clientConfig) (*kubeLocker, error) {
	// client-go's errors during a fault are the fault, and would drown
	// the run's output.
	klog.SetLogger(logr.Discard())
	cs, err := kubeClientset(c.endpoint, c.ttl)
	if err != nil {
		return nil, err
	}
	return &kubeLocker{cfg: c, cs: cs}, nil
}

func (l *kubeLocker) close() {}

func (l *kubeLocker) acquire(ctx context.Context, lock string) (holding, error) {
	name := kubeLeaseName(lock)
	if l.cfg.side == "peer" {
		return l.elect(ctx, name)
	}
	le, err := k8slease.Config{LeaseDuration: l.cfg.ttl}.Lock(ctx, l.cs, kubeNamespace, name, l.cfg.p)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	return leaseHolding{sig: le.Signal(), tok: le.Token(), unlock: le.Unlock}, nil
}

// elect runs a LeaderElector until it leads or ctx ends. Each acquire is a
// candidate of its own (the process's name and a count), so that the
// record's leaseTransitions, read after the grant, grows with each one: the
// token, since client-go has none.
func (l *kubeLocker) elect(ctx context.Context, name string) (holding, error) {
	l.acquires++
	identity := fmt.Sprintf("%s-%d", l.cfg.p, l.acquires)
	h := &electorHolding{led: make(chan context.Context, 1), lostC: make(chan struct{}), done: make(chan struct{})}
	d := l.cfg.ttl
	ectx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: kubeNamespace, Name: name},
			Client:     l.cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   d,
		RenewDeadline:   d * 10 / 15,
		RetryPeriod:     d * 2 / 15,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { h.led <- lctx },
			OnStoppedLeading: func() {
				if !h.releasing.Load() {
					h.lose()
				}
			},
		},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(h.done)
		le.Run(ectx)
	}()
	select {
	case lctx := <-h.led:
		h.leading = lctx
	case <-ctx.Done():
		cancel()
		<-h.done
		return nil, fmt.Errorf("%w: %w", errUnknown, ctx.Err())
	}
	lease, err := l.cs.CoordinationV1().Leases(kubeNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != identity {
		cancel()
		<-h.done
		return nil, fmt.Errorf("the token: %v", err)
	}
	h.tok = transitions(lease)
	return h, nil
}

func transitions(l *coordinationv1.Lease) int64 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return int64(*l.Spec.LeaseTransitions)
}

// electorHolding is a LeaderElector that leads: the holder acts while the
// context OnStartedLeading gave it is not done, as its users do.
type electorHolding struct {
	led      chan context.Context
	leading  context.Context
	tok      int64
	cancel   context.CancelFunc
	done     chan struct{}
	lostC    chan struct{}
	lostOnce sync.Once
	// releasing is set before the release: the elector stops leading then
	// too, which is no loss.
	releasing atomic.Bool
}

func (h *electorHolding) lose()                 { h.lostOnce.Do(func() { close(h.lostC) }) }
func (h *electorHolding) token() int64          { return h.tok }
func (h *electorHolding) lost() <-chan struct{} { return h.lostC }
func (h *electorHolding) held() bool            { return h.leading.Err() == nil }
func (h *electorHolding) release(ctx context.Context) error {
	h.releasing.Store(true)
	h.cancel()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
