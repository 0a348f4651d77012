package controller_test

import (
	"testing"

	"pgregory.net/rapid"
)

// FuzzLease is leaseProperty driven by the fuzzer's bytes instead of rapid's
// random source. go test replays the corpus in testdata/fuzz/FuzzLease;
// make fuzz searches for new cases.
func FuzzLease(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(leaseProperty))
}
