package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

func TestMain(m *testing.M) {
	if v, ok := os.LookupEnv(roleEnv); ok {
		// The demo starts its replicas as this binary again.
		if err := replica(v); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m, kubetest.IgnoreGoroutines()...)
}

// TestRun plays the demo and checks the story it tells: replica 1's
// reconcile is cut with the cause, replica 2 leads, replica 1 leads again
// after it, and both processes are alive at the end.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"replica-1  leads: setup of a new term, fencing token",
		"operator   set the Lease's holderIdentity to \"maintenance\"",
		"cause: lease lost: default/orders-operator: k8slease: the coordinator refused the claim: lease taken over",
		"replica-2  leads: setup of a new term, fencing token",
		"end: replica-1 alive true, replica-2 alive true",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the demo did not say %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "replica-1  leads:"); n != 2 {
		t.Errorf("replica-1 led %d terms, want 2:\n%s", n, got)
	}
}
