package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/k8slease"
)

// The proportions of client-go's LeaderElector in the table: the defaults
// of kube-controller-manager and controller-runtime.
const (
	electorLeaseDuration = 15 * time.Second
	electorRenewDeadline = 10 * time.Second
	electorRetryPeriod   = 2 * time.Second
	// electorPollMax is the longest a waiting LeaderElector sleeps
	// between two tries: client-go jitters the RetryPeriod by up to
	// JitterFactor (1.2) times itself.
	electorPollMax = electorRetryPeriod + electorRetryPeriod*12/10
)

// cycleIdentities numbers the candidates of the table: each client is
// one, unique among those of a subject.
var cycleIdentities atomic.Int64

var kubeCycle = cycleCoordinator{
	issuer: "k8s",
	name:   "Kubernetes",
	version: func(ctx context.Context, r *runner, addr string) (string, error) {
		cs, err := kubeClientset(addr, 10*time.Second)
		if err != nil {
			return "", err
		}
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			return "", err
		}
		if !strings.HasPrefix(v.GitVersion, "v0.0.0") {
			return "kube-apiserver " + v.GitVersion, nil
		}
		// A kube-apiserver built from the module, as kubetest builds it,
		// is not stamped: its version is the module's, in its build
		// information.
		for _, s := range r.servers() {
			for _, pid := range childrenOf(s.cmd.Process.Pid) {
				exe := fmt.Sprintf("/proc/%d/exe", pid)
				if target, _ := os.Readlink(exe); !strings.HasPrefix(filepath.Base(target), "kube-apiserver") {
					continue
				}
				bi, err := buildinfo.ReadFile(exe)
				if err != nil {
					return "", err
				}
				for _, m := range append([]*debug.Module{&bi.Main}, bi.Deps...) {
					if m.Path == "k8s.io/kubernetes" {
						return "kube-apiserver " + m.Version, nil
					}
				}
			}
		}
		return "kube-apiserver " + v.GitVersion, nil
	},
	clients: []cycleClient{
		{name: "k8slease", learns: learnsWatch + " (the namespace's Leases, one for the clientset)", open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
			cs, identity, err := newCycleKube(addr)
			if err != nil {
				return nil, nil, err
			}
			return k8slease.NewLocker(cs, kubeNamespace, identity, k8slease.Config{}), func() {}, nil
		}},
		{
			name: "client-go LeaderElector",
			learns: fmt.Sprintf("poll at %v to %v (its RetryPeriod, %v, with client-go's jitter of %v)",
				duration(electorRetryPeriod), duration(electorPollMax), duration(electorRetryPeriod), leaderelection.JitterFactor),
			open: func(ctx context.Context, addr string) (lease.Locker, func(), error) {
				cs, identity, err := newCycleKube(addr)
				if err != nil {
					return nil, nil, err
				}
				return lockerFunc(func(ctx context.Context, subject string) (lease.Lease, error) {
					return elect(ctx, cs, subject, identity)
				}), func() {}, nil
			},
			poll: electorPollMax,
			// Each takes seconds.
			handOvers: 20,
		},
	},
}

// newCycleKube returns a clientset of the server at addr, and a candidate
// identity of its own.
func newCycleKube(addr string) (*kubernetes.Clientset, string, error) {
	// client-go's messages of each election would drown the run's output.
	klog.SetLogger(logr.Discard())
	cs, err := kubeClientset(addr, 10*time.Second)
	if err != nil {
		return nil, "", err
	}
	return cs, fmt.Sprintf("cycle-%d", cycleIdentities.Add(1)), nil
}

// elect runs a LeaderElector of its own on the Lease name until it leads,
// or ctx ends; its release cancels the elector, which gives the Lease up
// (ReleaseOnCancel).
func elect(ctx context.Context, cs *kubernetes.Clientset, name, identity string) (lease.Lease, error) {
	led := make(chan struct{})
	ectx, cancel := context.WithCancel(context.Background())
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: kubeNamespace, Name: name},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   electorLeaseDuration,
		RenewDeadline:   electorRenewDeadline,
		RetryPeriod:     electorRetryPeriod,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(led) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		le.Run(ectx)
	}()
	select {
	case <-led:
	case <-ctx.Done():
		cancel()
		<-done
		return nil, ctx.Err()
	case <-done:
		cancel()
		return nil, errors.New("the LeaderElector stopped before it led")
	}
	return newPeerLease(name, 0, func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), nil
}
