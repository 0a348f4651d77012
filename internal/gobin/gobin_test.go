package gobin_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zukhruf/lease/internal/gobin"
)

// tool is the Binary of the module that newModule writes.
var tool = gobin.Binary{
	Name:    "tool",
	Module:  "example.com/tool",
	Package: "example.com/tool/cmd/tool",
	Env:     "GOBIN_TEST_TOOL",
	Make:    "tool-target",
	Took:    "a cold build takes seconds",
}

// newModule writes, into a new folder, a module that requires
// example.com/tool at version and replaces it with a folder beside it,
// whose command prints its version; it returns tool in that folder. The
// go command builds it with no network. mainSrc, if not empty, replaces the
// command's source.
func newModule(t *testing.T, version, mainSrc string) gobin.Binary {
	t.Helper()
	dir := t.TempDir()
	if mainSrc == "" {
		mainSrc = "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"tool " + version + "\") }\n"
	}
	files := map[string]string{
		"go.mod":                "module example.com/server\n\ngo 1.22\n\nrequire example.com/tool " + version + "\n\nreplace example.com/tool " + version + " => ./tool\n",
		"tool/go.mod":           "module example.com/tool\n\ngo 1.22\n",
		"tool/cmd/tool/main.go": mainSrc,
		"unrelated/README.md":   "not a module\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return tool.In(dir)
}

// offline sets a cache folder of the test's own, no override, and a go
// command that reaches no network and downloads no toolchain, and keeps the
// go command's build cache where it was (it lives in the user's cache folder
// too), so that a build compiles only the test's module; it returns the
// cache folder.
func offline(t *testing.T) string {
	t.Helper()
	if os.Getenv("GOCACHE") == "" {
		if out, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil {
			t.Setenv("GOCACHE", strings.TrimSpace(string(out)))
		}
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(tool.Env, "")
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOTOOLCHAIN", "local")
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "")
	return cache
}

// fakeGo puts first on PATH a go command that runs script (sh) and returns
// its folder, where the script may keep files.
func fakeGo(t *testing.T, script string) string {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return bin
}

// logs collects what Ensure logs, formatted.
type logs struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, fmt.Sprintf(format, args...))
}

func (l *logs) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// The go command builds the module's command into the cache folder, keyed
// by the version the module requires; the next call finds it and builds
// nothing.
func TestEnsureBuilds(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	cache := offline(t)
	b := newModule(t, "v1.2.3", "")
	var l logs
	path, err := b.Ensure(l.logf)
	if err != nil {
		t.Fatalf("Ensure = %v", err)
	}
	if want := filepath.Join(cache, "zukhruf-lease", "tool-v1.2.3"); path != want {
		t.Errorf("Ensure = %s, want %s", path, want)
	}
	out, err := exec.Command(path).Output()
	if err != nil || string(out) != "tool v1.2.3\n" {
		t.Errorf("the built binary printed %q, %v; want %q", out, err, "tool v1.2.3\n")
	}
	msgs := l.all()
	if len(msgs) != 1 || !strings.Contains(msgs[0], "building example.com/tool/cmd/tool into "+path) ||
		!strings.Contains(msgs[0], tool.Took) || !strings.Contains(msgs[0], "make tool-target") {
		t.Errorf("Ensure logged %q, want one message naming the package, the path, the time and make tool-target", msgs)
	}
	left, _ := filepath.Glob(path + ".tmp-*")
	if len(left) > 0 {
		t.Errorf("a build left %v", left)
	}

	// Found again: no build, even with no go command.
	t.Setenv("PATH", t.TempDir())
	var again logs
	if got, err := b.Ensure(again.logf); err != nil || got != path {
		t.Errorf("second Ensure = %q, %v; want %q", got, err, path)
	}
	if msgs := again.all(); len(msgs) != 0 {
		t.Errorf("second Ensure logged %q, want nothing", msgs)
	}
}

// A new version is a new binary; the old one stays.
func TestEnsureVersionKeysCache(t *testing.T) {
	cache := offline(t)
	fakeGo(t, `printf '#!/bin/sh\n' > "$3" && chmod +x "$3"`)
	for _, v := range []string{"v1.2.3", "v1.3.0"} {
		got, err := newModule(t, v, "").Ensure(nil)
		if want := filepath.Join(cache, "zukhruf-lease", "tool-"+v); err != nil || got != want {
			t.Errorf("Ensure of %s = %q, %v; want %q", v, got, err, want)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name, mod, want string
	}{
		{"block", "module m\n\nrequire (\n\texample.com/other v0.1.0\n\texample.com/tool v1.2.3 // indirect\n)\n", "v1.2.3"},
		{"line", "module m\n\nrequire example.com/tool v1.36.0\n", "v1.36.0"},
		{"comment names it first", "// Module m builds example.com/tool v9.9.9\nmodule m\n\nrequire example.com/tool v1.35.1\n", "v1.35.1"},
		{"replace block first", "module m\n\nreplace (\n\texample.com/tool v0.0.1 => ./tool\n)\n\nrequire example.com/tool v1.2.3\n", "v1.2.3"},
		{"replace line first", "module m\n\nreplace example.com/tool v0.0.1 => ./tool\n\nrequire example.com/tool v1.2.3\n", "v1.2.3"},
		{"exclude block first", "module m\n\nexclude (\n\texample.com/tool v1.0.0\n)\n\nrequire (\n\texample.com/tool v1.2.3\n)\n", "v1.2.3"},
		{"tool line", "module m\n\ntool example.com/tool/cmd/tool\n\nrequire example.com/tool v2.0.0\n", "v2.0.0"},
		{"a longer path", "module m\n\nrequire example.com/tool/v2 v2.0.0\n", ""},
		{"replaced only", "module m\n\nreplace (\n\texample.com/tool v0.0.1 => ./tool\n)\n", ""},
		{"none", "module m\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(tc.mod), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := tool.In(dir).Version()
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "requires no version of example.com/tool") {
					t.Errorf("Version = %q, %v; want an error saying it requires no version of example.com/tool", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Version = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The variable names the binary, made absolute; without it, the binary is
// kept under the user's cache folder by version.
func TestPath(t *testing.T) {
	cache := offline(t)
	b := newModule(t, "v1.2.3", "")
	if got, err := b.Path(); err != nil || got != filepath.Join(cache, "zukhruf-lease", "tool-v1.2.3") {
		t.Errorf("Path = %q, %v; want it under %s", got, err, cache)
	}
	t.Setenv(tool.Env, "/some/tool")
	if got, err := b.Path(); err != nil || got != "/some/tool" {
		t.Errorf("Path with %s=/some/tool = %q, %v", tool.Env, got, err)
	}
	t.Chdir(t.TempDir())
	wd, _ := os.Getwd()
	t.Setenv(tool.Env, "bin/tool")
	if got, err := b.Path(); err != nil || got != filepath.Join(wd, "bin", "tool") {
		t.Errorf("Path with %s=bin/tool = %q, %v; want %s", tool.Env, got, err, filepath.Join(wd, "bin", "tool"))
	}
	// The override needs no module.
	if got, err := tool.In(filepath.Join(t.TempDir(), "none")).Path(); err != nil || got != filepath.Join(wd, "bin", "tool") {
		t.Errorf("Path with %s set and no module = %q, %v", tool.Env, got, err)
	}
}

// A binary that the variable names is used as it is: nothing is built, and
// no module is needed, as in a test binary built with -trimpath.
func TestEnsureOverride(t *testing.T) {
	offline(t)
	bin := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tool.Env, bin)
	fakeGo(t, "exit 1\n")
	for _, dir := range []string{newModule(t, "v1.2.3", "").Dir, filepath.Join(t.TempDir(), "none"), ""} {
		var l logs
		if got, err := tool.In(dir).Ensure(l.logf); err != nil || got != bin || len(l.all()) != 0 {
			t.Errorf("Ensure with module folder %q = %q, %v, logged %q; want %q and no build", dir, got, err, l.all(), bin)
		}
	}
}

// With the variable naming a file not there yet, Ensure builds into it.
func TestEnsureOverrideBuildsInto(t *testing.T) {
	offline(t)
	bin := filepath.Join(t.TempDir(), "sub", "tool")
	t.Setenv(tool.Env, bin)
	fakeGo(t, `printf '#!/bin/sh\n' > "$3" && chmod +x "$3"`)
	if got, err := newModule(t, "v1.2.3", "").Ensure(nil); err != nil || got != bin {
		t.Errorf("Ensure = %q, %v; want %q", got, err, bin)
	}
}

// Without its module and without the variable, Ensure and Path fail naming
// the folder and the variable.
func TestMissingModule(t *testing.T) {
	offline(t)
	missing := filepath.Join(t.TempDir(), "none")
	for name, call := range map[string]func(gobin.Binary) (string, error){
		"Ensure":    func(b gobin.Binary) (string, error) { return b.Ensure(nil) },
		"Path":      gobin.Binary.Path,
		"Version":   gobin.Binary.Version,
		"ModuleDir": gobin.Binary.ModuleDir,
	} {
		for _, dir := range []string{missing, newModule(t, "v1.2.3", "").Dir + "/unrelated", ""} {
			_, err := call(tool.In(dir))
			if err == nil || !strings.HasPrefix(err.Error(), "gobin: ") || !strings.Contains(err.Error(), tool.Env) || !strings.Contains(err.Error(), dir) {
				t.Errorf("%s with module folder %q = %v, want a gobin error naming the folder and %s", name, dir, err, tool.Env)
			}
		}
	}
}

// With no go command, Ensure fails saying so and naming the make target.
func TestEnsureNoGo(t *testing.T) {
	cache := offline(t)
	t.Setenv("PATH", t.TempDir())
	_, err := newModule(t, "v1.2.3", "").Ensure(nil)
	if err == nil || !strings.Contains(err.Error(), "go command") || !strings.Contains(err.Error(), "install Go") || !strings.Contains(err.Error(), "make tool-target") {
		t.Errorf("Ensure without go = %v, want an error naming the go command, Go and make tool-target", err)
	}
	if _, err := os.Stat(filepath.Join(cache, "zukhruf-lease", "tool-v1.2.3")); !os.IsNotExist(err) {
		t.Errorf("stat of the binary after no build = %v, want no file", err)
	}
}

// A failed build leaves no binary and no temporary file; its error carries
// the compiler's words and names the make target.
func TestEnsureBuildFails(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	cache := offline(t)
	b := newModule(t, "v1.2.3", "package main\n\nfunc main() { undefinedName() }\n")
	_, err := b.Ensure(nil)
	if err == nil || !strings.Contains(err.Error(), "undefinedName") || !strings.Contains(err.Error(), "make tool-target") {
		t.Errorf("Ensure of a failing build = %v, want the compiler's words and make tool-target", err)
	}
	path := filepath.Join(cache, "zukhruf-lease", "tool-v1.2.3")
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("after a failed build, stat %s = %v, want no file", path, err)
	}
	if left, _ := filepath.Glob(path + ".tmp-*"); len(left) > 0 {
		t.Errorf("a failed build left %v", left)
	}
}

// Ensure runs go build -o TEMP PACKAGE in the module's folder, then
// renames: the binary appears whole. Calls made at once build once; the
// others wait and find the binary.
func TestEnsureBuildsOnce(t *testing.T) {
	cache := offline(t)
	b := newModule(t, "v1.2.3", "")
	// The fake go logs its arguments and folder, takes its time so that
	// the calls overlap, and writes an executable to its -o argument.
	bin := fakeGo(t, `echo "$PWD $*" >> "$(dirname "$0")/builds"
case "$3" in *.tmp-*) ;; *) echo "not a temporary name: $3" >&2; exit 1;; esac
sleep 0.5
printf '#!/bin/sh\n' > "$3" && chmod +x "$3"
`)
	want := filepath.Join(cache, "zukhruf-lease", "tool-v1.2.3")
	const calls = 4
	var wg sync.WaitGroup
	var l logs
	errs := make([]error, calls)
	paths := make([]string, calls)
	for i := range calls {
		wg.Go(func() { paths[i], errs[i] = b.Ensure(l.logf) })
	}
	wg.Wait()
	for i := range calls {
		if errs[i] != nil || paths[i] != want {
			t.Errorf("call %d: Ensure = %q, %v; want %q", i, paths[i], errs[i], want)
		}
	}
	data, err := os.ReadFile(filepath.Join(bin, "builds"))
	if err != nil {
		t.Fatal(err)
	}
	builds := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(builds) != 1 {
		t.Fatalf("%d builds, want 1:\n%s", len(builds), data)
	}
	if prefix := b.Dir + " build -o " + want + ".tmp-"; !strings.HasPrefix(builds[0], prefix) || !strings.HasSuffix(builds[0], " "+tool.Package) {
		t.Errorf("the build ran %q, want %q...%s", builds[0], prefix, tool.Package)
	}
	var said int
	for _, m := range l.all() {
		if strings.Contains(m, "building") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("%d calls said they build, want 1: %q", said, l.all())
	}
}

// A Binary that lacks a field fails at once, naming it.
func TestIncomplete(t *testing.T) {
	offline(t)
	dir := newModule(t, "v1.2.3", "").Dir
	for _, tc := range []struct {
		b    gobin.Binary
		want string
	}{
		{gobin.Binary{}, "Name"},
		{gobin.Binary{Name: "tool", Package: tool.Package, Dir: dir}, "Module"},
		{gobin.Binary{Name: "tool", Module: tool.Module, Dir: dir}, "Package"},
	} {
		if _, err := tc.b.Ensure(nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ensure of %+v = %v, want an error naming %s", tc.b, err, tc.want)
		}
		if _, err := tc.b.Path(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Path of %+v = %v, want an error naming %s", tc.b, err, tc.want)
		}
	}
}

// Beside is relative to the folder of its caller's source file.
func TestBeside(t *testing.T) {
	wd, err := os.Getwd() // go test runs in the package's folder
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gobin.Beside("testdata/server"), filepath.Join(wd, "testdata", "server"); got != want {
		t.Errorf("Beside = %s, want %s", got, want)
	}
}

func ExampleBinary_Version() {
	// The module that pins the tool: kept beside the package that runs
	// it (gobin.Beside), here made in a folder of its own.
	dir, err := os.MkdirTemp("", "server")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	pin := "module example.com/server\n\ngo 1.22\n\nrequire example.com/tool v1.2.3\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(pin), 0o644); err != nil {
		panic(err)
	}
	b := gobin.Binary{
		Name:    "tool",
		Module:  "example.com/tool",
		Package: "example.com/tool/cmd/tool",
		Dir:     dir,
	}
	v, err := b.Version()
	fmt.Println(v, err)
	// Output: v1.2.3 <nil>
}
