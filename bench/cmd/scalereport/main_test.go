package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `nproc: 2
goos: linux
goarch: amd64
cpu: Some CPU
BenchmarkScaleAfterLoss/impl=lease         	 1000000	       100 ns/op	      64 B/op	       2 allocs/op
BenchmarkScaleAfterLoss/impl=lease         	 1000000	       120 ns/op	      64 B/op	       2 allocs/op
BenchmarkScaleAfterLoss/impl=lease         	 1000000	       110 ns/op	      64 B/op	       2 allocs/op
BenchmarkScaleAfterLoss/impl=lease-2       	 1000000	        60 ns/op	      64 B/op	       2 allocs/op
BenchmarkScaleAfterLoss/impl=limit-2       	 1000000	        50 ns/op	      64 B/op	       2 allocs/op
BenchmarkScaleAfterLoss/impl=context-2     	 1000000	       200 ns/op	     128 B/op	       2 allocs/op
BenchmarkScaleLose/impl=lease-2            	     300	    500000 ns/op	       150.0 ns/context	  250000 B/op	    2700 allocs/op
BenchmarkScaleLose/impl=context-2          	     300	   1500000 ns/op	       900.0 ns/context	  350000 B/op	    4200 allocs/op
BenchmarkUnknown/impl=lease-2              	 1000000	        60 ns/op
`

const before = `nproc: 2
BenchmarkScaleAfterLoss/impl=lease-2       	 1000000	       400 ns/op	      64 B/op	       2 allocs/op
BenchmarkScaleAfterLoss/impl=limit-2       	 1000000	        55 ns/op	      64 B/op	       2 allocs/op
`

func write(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReport reads the samples by op, impl and core count, the lease of the
// earlier tree apart, and writes the medians and ratios into the section of
// a Markdown file, leaving the rest of it as it was.
func TestReport(t *testing.T) {
	s := make(samples)
	m, err := read(s, []string{write(t, "new.txt", sample)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := read(s, []string{write(t, "old.txt", before)}, true); err != nil {
		t.Fatal(err)
	}
	if m.nproc != "2" || m.cpu != "Some CPU" {
		t.Errorf("machine = %+v, want 2 cores of Some CPU", m)
	}
	for _, c := range []struct {
		op, impl string
		cores    int
		want     float64
	}{
		{"ScaleAfterLoss", "lease", 1, 110},
		{"ScaleAfterLoss", "lease", 2, 60},
		{"ScaleAfterLoss", "lease before", 2, 400},
		{"ScaleLose", "context", 2, 900}, // read in ns/context
	} {
		if got, ok := s.median(c.op, c.impl, c.cores); !ok || got != c.want {
			t.Errorf("median(%s, %s, %d) = %v, %v; want %v", c.op, c.impl, c.cores, got, ok, c.want)
		}
	}
	if _, ok := s.median("ScaleAfterLoss", "limit before", 2); ok || s["Unknown"] != nil {
		t.Error("kept a result that is neither an op of the table nor the lease of the earlier tree")
	}

	md := write(t, "doc.md", "# Doc\n\nbefore\n<!-- scale:2-core -->\nold table\n<!-- /scale:2-core -->\nafter\n")
	var table strings.Builder
	writeTable(&table, s, m, "")
	if err := replaceSection(md, "2-core", []byte(table.String())); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"before\n<!-- scale:2-core -->\nMachine: 2 cores (nproc), Some CPU.",
		"| AfterLoss + stop (ns/op) | lease | 110 | 60.0 |",
		"| AfterLoss + stop | lease ÷ limit | | 1.20× |",
		"| AfterLoss + stop | lease ÷ context | | 0.30× |",
		"| Lose, 1,000 contexts from 16 goroutines, per context (ns/context) | context | | 900 |",
		"<!-- /scale:2-core -->\nafter\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the Markdown file lacks %q; it reads:\n%s", want, got)
		}
	}
	if strings.Contains(string(got), "old table") {
		t.Error("the old section was kept")
	}
}
