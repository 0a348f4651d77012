package signalcancel_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/zukhruf/lease/signalcancel"
)

// TestAnalyzer runs the analyzer over testdata, a module that uses the real
// package signal (a replace names this repository), so a change of its path
// or its API fails here: a holds the cases of go vet's lostcancel testdata
// transposed, b calls it must not report. analysistest loads the module
// without the proxy; make test-signalcancel downloads what it requires.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), signalcancel.Analyzer, "./a", "./b")
}
