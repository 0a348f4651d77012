package main

import (
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(envA); spec != "" {
		os.Exit(holderA(spec)) // holder A, the test binary run again
	}
	os.Exit(m.Run())
}

// TestDemo runs the demo: A's second batch is refused with ErrStale and
// B's rows are the table's.
func TestDemo(t *testing.T) {
	var out strings.Builder
	if err := run(&out, os.Args[0]); err != nil {
		t.Fatalf("run() = %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"checks its lease before batch 2: Signal().Err() = <nil>",
		"errors.Is(err, fencing.ErrStale) = true",
		"invoice_rows (line:holder/batch): 1:B/1 2:B/1 3:B/1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the timeline lacks %q:\n%s", want, out.String())
		}
	}
}
