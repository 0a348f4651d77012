package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/zukhruf/lease/bench
BenchmarkErrLive/impl=lease-2         	1000000000	         0.50 ns/op	       0 B/op	       0 allocs/op
BenchmarkErrLive/impl=lease-2         	1000000000	         0.70 ns/op	       0 B/op	       0 allocs/op
BenchmarkErrLive/impl=lease-2         	1000000000	         0.60 ns/op	       0 B/op	       0 allocs/op
BenchmarkErrLive/impl=context-2       	479396510	         2.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkErrLive/impl=context-2       	479396510	         2.40 ns/op	       0 B/op	       0 allocs/op
BenchmarkLifecycle/impl=lease-2       	30190593	        100 ns/op	      80 B/op	       1 allocs/op
BenchmarkLifecycle/impl=context-2     	 8560444	       200 ns/op	      96 B/op	       2 allocs/op
BenchmarkMemory/impl=lease-2          	      12	  92475474 ns/op	        64.00 B/lease	64000000 B/op	 1000000 allocs/op
BenchmarkMemory/impl=context-2        	       6	 206712885 ns/op	        96.00 B/lease	96000000 B/op	 2000000 allocs/op
BenchmarkContext/impl=lease-2         	 1000000	        90 ns/op	     120 B/op	       3 allocs/op
BenchmarkContext/impl=context.child-2 	 1000000	       100 ns/op	      96 B/op	       2 allocs/op
BenchmarkContextRequest/impl=lease-2  	 1000000	       100 ns/op	     144 B/op	       4 allocs/op
BenchmarkContextRequest/impl=context-2	 1000000	       300 ns/op	     264 B/op	       6 allocs/op
BenchmarkAnyScale/impl=lease-2        	    1000	    100000 ns/op	       100.0 ns/source	   50000 B/op	       6 allocs/op
BenchmarkAnyScale/impl=context-2      	    1000	    500000 ns/op	       500.0 ns/source	  160000 B/op	    3000 allocs/op
`

func TestReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(path, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := read([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.median("ErrLive", "lease", "ns/op"); got != 0.6 {
		t.Errorf("median of ErrLive/lease = %v, want 0.6", got)
	}
	if got, _ := s.median("ErrLive", "context", "ns/op"); got != 2.2 {
		t.Errorf("median of ErrLive/context = %v, want 2.2", got)
	}
	var out strings.Builder
	report(&out, s)
	for _, want := range []string{
		"| ErrLive | context | ns/op | 0.60 | 2.20 | – | 0.273 | ≤ 0.35 | yes | 0, 0 | 0, 0 |",
		"| Lifecycle | context | ns/op | 100 | 200 | – | 0.500 | ≤ 0.35 | no, by 1.43× | 1, 80 (goal ≤ 64 B: missed) | 2, 96 |",
		"| Memory | context | B/lease | 64.0 | 96.0 | – | 0.667 | ≤ 0.7 | yes |",
		"| Context | context.child | ns/op | 90.0 | 100 | – | 0.900 | ≤ 1 | yes | 3, 120 (goal: no more than the peer: missed) | 2, 96 |",
		"| ContextRequest | context | ns/op | 100 | 300 | – | 0.333 | ≤ 0.5 | yes | 4, 144 (goal ≤ 3 allocs: missed) | 6, 264 |",
		"| AnyScale | context | ns/source | 100 | 500 | – | 0.200 | – | stated |",
		"| Wake | context | ns/op | (no data) |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q; got\n%s", want, out.String())
		}
	}
	svg := filepath.Join(t.TempDir(), "chart.svg")
	if err := chart(svg, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "ErrLive") {
		t.Errorf("chart is not an SVG naming ErrLive: %.200s", b)
	}
}
