package leasetest_test

import (
	"flag"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/internal/rapidcheck"
)

func TestMain(m *testing.M) {
	flag.Parse()
	rapidcheck.Raise(1000)
	goleak.VerifyTestMain(m)
}
