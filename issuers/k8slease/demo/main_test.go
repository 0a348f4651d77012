package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kubetest.IgnoreGoroutines()...)
}

// TestRun plays the demo and checks the story it tells: A is told that the
// Lease was taken away, B takes over with a larger token, and the warehouse
// refuses A's late write. How many batches A writes before it is told
// depends on the machine's speed, so the test does not say.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"holder A  batch 3 stored with fencing token",
		"operator  set the Lease's holderIdentity to \"maintenance\"",
		"holder A  told before batch ",
		"errors.Is(err, k8slease.ErrTakenOver) = true",
		"lease lost: default/orders: k8slease: the coordinator refused the claim: lease taken over",
		"holder B  holds default/orders as node-b",
		"warehouse refused a late retry of A's batch ",
		"holder B  unlocked; its signal after the release: Err() = <nil>",
		"the Lease now records holderIdentity <none>, leaseDurationSeconds 1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the demo did not say %q; it said:\n%s", want, got)
		}
	}
}
