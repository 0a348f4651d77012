package singleflight_test

import (
	"flag"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/internal/rapidcheck"
)

// hangGuard bounds every wait in these tests. It only keeps a broken group
// from hanging the run; no test measures time against it.
const hangGuard = 10 * time.Second

// minRapidChecks is how many schedules the property checks in a plain go
// test run; rapid's own default is 100.
const minRapidChecks = 1000

func TestMain(m *testing.M) {
	flag.Parse()
	rapidcheck.Raise(minRapidChecks)
	// Flights run in goroutines of their own (DoChan) and the tests start
	// callers; none may outlive them.
	goleak.VerifyTestMain(m)
}
