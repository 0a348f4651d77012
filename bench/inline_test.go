package bench_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The holder packages whose marked calls must be inlined: one imports
// package signal, the other only package controller.
var holders = []string{"./holder", "./holder/viacontroller"}

// A site is a call the compiler must inline: file base name, line and callee
// as -gcflags=-m names it, such as signal.(*Signal).Err.
type site struct {
	file   string
	line   int
	callee string
}

func (s site) String() string { return fmt.Sprintf("%s:%d: %s", s.file, s.line, s.callee) }

var marker = regexp.MustCompile(`// inlined: (\w+\.(?:\(\*?\w+\)\.)?\w+)\s*$`)

// markedSites returns the calls marked "// inlined: callee" in the Go files
// of the given package directories.
func markedSites(t *testing.T, dirs ...string) []site {
	t.Helper()
	var sites []site
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(src), "\n") {
				if m := marker.FindStringSubmatch(line); m != nil {
					sites = append(sites, site{filepath.Base(f), i + 1, m[1]})
				}
			}
		}
	}
	// Without marked calls of both methods the checks below would pass
	// having checked nothing.
	for _, callee := range []string{"signal.(*Signal).Err", "signal.(*Signal).Done"} {
		if !slices.ContainsFunc(sites, func(s site) bool { return s.callee == callee }) {
			t.Fatalf("no call marked // inlined: %s in %v", callee, dirs)
		}
	}
	return sites
}

var inlineLine = regexp.MustCompile(`^(\S+\.go):(\d+):\d+: inlining call to (\S+)$`)

// inlinedSites parses the output of go build -gcflags=-m into the set of
// calls the compiler reports as inlined.
func inlinedSites(out []byte) map[site]bool {
	got := make(map[site]bool)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := inlineLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var line int
		fmt.Sscan(m[2], &line)
		got[site{filepath.Base(m[1]), line, m[3]}] = true
	}
	return got
}

// notInlined returns the sites the output does not report as inlined.
func notInlined(want []site, out []byte) []site {
	got := inlinedSites(out)
	var missing []site
	for _, s := range want {
		if !got[s] {
			missing = append(missing, s)
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i].String() < missing[j].String() })
	return missing
}

// goTool returns the go command of the toolchain running the test.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// buildM builds pkg with the given compiler flags and returns the compiler's
// diagnostics.
func buildM(t *testing.T, gcflags, pkg string) []byte {
	t.Helper()
	cmd := exec.Command(goTool(), "build", "-gcflags="+gcflags, pkg)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=%s %s: %v\n%s", gcflags, pkg, err, out)
	}
	return out
}

// TestInlining fails when Signal.Err or Signal.Done is no longer inlined into
// a holder's code, whether the holder imports package signal or reaches the
// signal through package controller alone.
func TestInlining(t *testing.T) {
	for _, pkg := range holders {
		t.Run(filepath.Base(pkg), func(t *testing.T) {
			want := markedSites(t, pkg)
			if len(want) == 0 {
				t.Fatalf("no call in %s is marked // inlined:", pkg)
			}
			out := buildM(t, "-m", pkg)
			missing := notInlined(want, out)
			for _, s := range missing {
				t.Errorf("%s is not inlined into %s", s, pkg)
			}
			if len(missing) > 0 && pkg == "./holder/viacontroller" {
				t.Log("The compiler puts an imported method's body in a package's " +
					"export data only if that package inlined it: package controller " +
					"must inline Signal.Err and Signal.Done somewhere itself.")
			}
		})
	}
}

// TestInliningCheckSeesNoInline shows that the check above can fail: with
// inlining turned off (-l), every marked call must be reported.
func TestInliningCheckSeesNoInline(t *testing.T) {
	for _, pkg := range holders {
		t.Run(filepath.Base(pkg), func(t *testing.T) {
			want := markedSites(t, pkg)
			out := buildM(t, "-m -l", pkg)
			if got := notInlined(want, out); len(got) != len(want) {
				t.Errorf("with -l, not inlined = %v, want all of %v", got, want)
			}
		})
	}
}

func TestInlinedSitesParses(t *testing.T) {
	out := []byte("# x\n" +
		"holder/holder.go:27:11: inlining call to signal.(*Signal).Err\n" +
		"holder/holder.go:27:11: inlining call to core.(*Lease).Err\n" +
		"holder/holder.go:30:6: can inline Foo\n")
	want := []site{
		{"holder.go", 27, "signal.(*Signal).Err"},
		{"holder.go", 28, "signal.(*Signal).Err"},
		{"holder.go", 30, "signal.(*Signal).Done"},
	}
	got := notInlined(want, out)
	if len(got) != 2 || got[0] != want[1] || got[1] != want[2] {
		t.Errorf("notInlined = %v, want %v", got, want[1:])
	}
}
