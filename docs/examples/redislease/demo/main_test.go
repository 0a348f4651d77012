package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

// TestRun plays the demo and checks the story it tells.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		`holder A  locked "orders" with fencing token 1`,
		"operator  DEL orders",
		"errors.Is(err, redislease.ErrDeleted) = true",
		`holder B  locked "orders" with fencing token 2, larger than A's 1`,
		"holder B  unlocked; its signal after the release: Err() = <nil>",
		`holder C  locked "orders" with fencing token 1; the key is on 2 of the 2 replicas as Lock returns (WAIT)`,
		"holder C  lost: lease lost: orders: redislease: renewal unconfirmed",
		`holder D  locked "orders" on the new primary with fencing token 2, larger than C's 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the demo did not say %q; it said:\n%s", want, got)
		}
	}
	t.Logf("\n%s", got)
}
