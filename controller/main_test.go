package controller_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// minRapidChecks is how many cases each rapid property checks in a plain
// go test run; rapid's own default is 100.
const minRapidChecks = 1000

func TestMain(m *testing.M) {
	flag.Parse()
	setRapidChecks()
	// The tests start goroutines (AfterLoss callbacks, waiters, histories);
	// none may outlive them.
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
