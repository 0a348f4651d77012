package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite the golden file from this run")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemo runs both scenarios of `make demo` and compares what they print
// with the repository's testdata/demo.golden: batches 1 and 2 land, batch 3 is cut in flight
// with the *lost.Error, and after a release the late loss reaches nobody.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.Bytes())
	}
	// The warehouse listens on a port chosen at run time.
	got := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).ReplaceAllString(out.String(), "http://warehouse")

	golden := filepath.Join("..", "..", "..", "testdata", "demo.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("demo output differs from %s (-want +got):\n%s", golden, diff)
	}
}
