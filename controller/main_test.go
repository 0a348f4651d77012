package controller_test

import (
	"flag"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/internal/rapidcheck"
)

// minRapidChecks is how many cases each rapid property checks in a plain
// go test run; rapid's own default is 100.
const minRapidChecks = 1000

func TestMain(m *testing.M) {
	flag.Parse()
	rapidcheck.Raise(minRapidChecks)
	// The tests start goroutines (AfterLoss callbacks, waiters, histories);
	// none may outlive them.
	goleak.VerifyTestMain(m)
}
