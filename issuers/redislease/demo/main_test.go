package main

import (
	"bytes"
	"regexp"
	"strconv"
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
		`holder A  locked "orders" with fencing token (\d+)\n`,
		"operator  DEL orders",
		`errors\.Is\(err, redislease\.ErrDeleted\) = true`,
		`(?s)holder A  unlocked: the key's claim.*holder B  locked "orders" with fencing token (\d+), larger than A's (\d+)\n`,
		`holder B  unlocked; its signal after the release: Err\(\) = <nil>`,
		`holder C  locked "orders" with fencing token (\d+); the key is on 2 of the 2 replicas as Lock returns \(WAIT\)`,
		"holder C  lost: lease lost: orders: redislease: renewal unconfirmed",
		`holder D  locked "orders" on the new primary with fencing token (\d+), larger than C's (\d+)\n`,
	} {
		m := regexp.MustCompile(want).FindStringSubmatch(got)
		if m == nil {
			t.Errorf("the demo did not say %q; it said:\n%s", want, got)
			continue
		}
		// "larger than": the first token is the newer holder's.
		if len(m) == 3 {
			newer, _ := strconv.ParseInt(m[1], 10, 64)
			older, _ := strconv.ParseInt(m[2], 10, 64)
			if newer <= older {
				t.Errorf("the demo said %q: the newer token is not larger", m[0])
			}
		}
	}
	t.Logf("\n%s", got)
}
