package singleflight_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// hangGuard bounds every wait in these tests. It only keeps a broken group
// from hanging the run; no test measures time against it.
const hangGuard = 10 * time.Second

// minRapidChecks is how many schedules the property checks in a plain go
// test run; rapid's own default is 100.
const minRapidChecks = 1000

func TestMain(m *testing.M) {
	flag.Parse()
	setRapidChecks()
	// Flights run in goroutines of their own (DoChan) and the tests start
	// callers; none may outlive them.
	goleak.VerifyTestMain(m)
}

// setRapidChecks raises rapid's number of checks to minRapidChecks unless the
// command line (-rapid.checks) or the environment (RAPID_CHECKS) chose one.
func setRapidChecks() {
	if _, ok := os.LookupEnv("RAPID_CHECKS"); ok {
		return
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if set {
		return
	}
	if err := flag.Set("rapid.checks", fmt.Sprint(minRapidChecks)); err != nil {
		panic(err)
	}
}
