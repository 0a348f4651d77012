package signalcancel_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/zukhruf/lease/signalcancel"
)

// TestAnalyzer runs the analyzer over testdata, a module that uses the real
// package signal (a replace names this repository), so a change of its path
// or its API fails here. Its packages a, b and typeparams are those of go
// vet's lostcancel testdata, each case transposed to Signal.Context or
// signal.Any; b and typeparams also hold Context methods of other types,
// which must not be reported. analysistest loads the module without the
// proxy; make test-signalcancel downloads what it requires.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), signalcancel.Analyzer, "./a", "./b", "./typeparams")
}
