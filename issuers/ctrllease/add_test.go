package ctrllease_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/zukhruf/lease/issuers/ctrllease"
	"github.com/zukhruf/lease/issuers/k8slease"
)

// nowhere is a config whose apiserver does not exist: making a Manager
// asks it nothing.
var nowhere = &rest.Config{Host: "https://127.0.0.1:1"}

func newManager(t *testing.T, o manager.Options) manager.Manager {
	t.Helper()
	o.Metrics = metricsserver.Options{BindAddress: "0"}
	m, err := manager.New(nowhere, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func noSetup(manager.Manager, *k8slease.Lease) error { return nil }

// TestAddRefusesMistakes wants each mistake named by Add itself. The first
// case also pins the reading of controller-runtime's Manager that tells
// LeaderElection: if its layout changes, this test fails, not the users.
func TestAddRefusesMistakes(t *testing.T) {
	opts := ctrllease.Options{Namespace: "default", Name: "x", Identity: "a"}
	for _, c := range []struct {
		name  string
		mgr   manager.Options
		opts  ctrllease.Options
		setup ctrllease.Setup
		want  string
	}{
		{"leader election on", manager.Options{LeaderElection: true, LeaderElectionID: "x", LeaderElectionNamespace: "default"}, opts, noSetup, "LeaderElection true"},
		{"nil setup", manager.Options{}, opts, nil, "nil Setup"},
		{"no name", manager.Options{}, ctrllease.Options{Namespace: "default"}, noSetup, "Options.Name is empty"},
		{"negative stop timeout", manager.Options{}, ctrllease.Options{Namespace: "default", Name: "x", StopTimeout: -time.Second}, noSetup, "negative"},
		{"stop timeout past the grace", manager.Options{GracefulShutdownTimeout: new(10 * time.Second)}, opts, noSetup, "not below the Manager's GracefulShutdownTimeout 10s"},
		{"default stop timeout past the grace", manager.Options{GracefulShutdownTimeout: new(25 * time.Second)}, opts, noSetup, "StopTimeout 25s is not below"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ctrllease.Add(newManager(t, c.mgr), c.opts, c.setup)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ctrllease: Add") {
				t.Fatalf("Add = %v, want an error of Add naming %q", err, c.want)
			}
		})
	}
}

func TestAddTakesAGoodOne(t *testing.T) {
	for name, o := range map[string]manager.Options{
		"default grace":     {},
		"grace forever":     {GracefulShutdownTimeout: new(time.Duration(-1))},
		"grace of a minute": {GracefulShutdownTimeout: new(time.Minute)},
	} {
		t.Run(name, func(t *testing.T) {
			e, err := ctrllease.Add(newManager(t, o), ctrllease.Options{Namespace: "default", Name: "x"}, noSetup)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(e.Identity(), "_") {
				t.Fatalf("default identity %q: want host name, _ and a UUID", e.Identity())
			}
			if e.Leading() || e.Terms() != 0 || e.Err() != nil {
				t.Fatal("an Elector not started leads")
			}
		})
	}
}
