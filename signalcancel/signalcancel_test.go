package signalcancel_test

import (
	"reflect"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/zukhruf/lease/signal"
	"github.com/zukhruf/lease/signalcancel"
)

// TestAnalyzer runs the analyzer over testdata, a module that uses the real
// package signal: a holds the cases of go vet's lostcancel testdata
// transposed, b calls it must not report.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), signalcancel.Analyzer, "./a", "./b")
}

// TestSignalPath: the path the analyzer looks for is the signal package's.
func TestSignalPath(t *testing.T) {
	if got := reflect.TypeFor[signal.Signal]().PkgPath(); got != signalcancel.SignalPath {
		t.Errorf("signal.Signal's package = %q, want %q", got, signalcancel.SignalPath)
	}
}
