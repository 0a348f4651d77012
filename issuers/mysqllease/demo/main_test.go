package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun plays the demo and checks the story it tells: A is told of the
// kill, B takes over with a larger token, and the table refuses A's late
// write. How many batches A writes before it is told depends on the
// machine's speed, so the test does not say.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"holder A  batch 3 stored with fencing token 1: true",
		"operator  KILL CONNECTION ",
		"holder A  told before batch ",
		"errors.Is(err, mysqllease.ErrConnLost) = true",
		"holder B  locked \"orders\", fencing token 2",
		"table     refused a late retry of A's batch ",
		"holder B  unlocked; its signal after the release: Err() = <nil>",
		"lease lost: orders: mysqllease: connection lost: the server ended the session",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the demo did not say %q; it said:\n%s", want, got)
		}
	}
}
