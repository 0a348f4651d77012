package kubebin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest/kubebin"
)

// module writes a go.mod requiring k8s.io/kubernetes at version into a new
// folder and returns the folder.
func module(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	mod := "module example.com/apiserver\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/api v0.37.2 // indirect\n\tk8s.io/kubernetes " + version + " // indirect\n)\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fakeGo puts first on PATH a go command that runs script (sh) and returns
// the folder where it may keep files.
func fakeGo(t *testing.T, script string) string {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return bin
}

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name, mod, want string
	}{
		{"block", "module m\n\nrequire (\n\tk8s.io/kubernetes v1.37.2 // indirect\n)\n", "v1.37.2"},
		{"line", "module m\n\nrequire k8s.io/kubernetes v1.36.0\n", "v1.36.0"},
		{"comment names it first", "// Module m builds from k8s.io/kubernetes for the tests\nmodule m\n\nrequire k8s.io/kubernetes v1.35.1\n", "v1.35.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(tc.mod), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := kubebin.Version(dir); err != nil || got != tc.want {
				t.Errorf("Version = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module m\n"), 0o644)
	if v, err := kubebin.Version(dir); err == nil {
		t.Errorf("Version of a module without k8s.io/kubernetes = %q, want an error", v)
	}
}

// The repository's own module requires a version, and the binary's path is
// keyed by it under the user's cache folder, unless KUBE_APISERVER names
// another.
func TestPath(t *testing.T) {
	dir, err := kubebin.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	v, err := kubebin.Version(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(kubebin.Env, "")
	if got, want := mustPath(t, dir), filepath.Join(cache, "zukhruf-lease", "kube-apiserver-"+v); got != want {
		t.Errorf("Path = %s, want %s", got, want)
	}
	other := filepath.Join(t.TempDir(), "kas")
	t.Setenv(kubebin.Env, other)
	if got := mustPath(t, dir); got != other {
		t.Errorf("Path with %s=%s = %s", kubebin.Env, other, got)
	}
}

func mustPath(t *testing.T, dir string) string {
	t.Helper()
	p, err := kubebin.Path(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A binary already there is used as it is: nothing is built.
func TestEnsureFound(t *testing.T) {
	mod := module(t, "v1.37.2")
	kas := filepath.Join(t.TempDir(), "kas")
	os.WriteFile(kas, []byte("#!/bin/sh\n"), 0o755)
	t.Setenv(kubebin.Env, kas)
	fakeGo(t, "exit 1\n")
	if got, err := kubebin.EnsureIn(mod, nil); err != nil || got != kas {
		t.Errorf("Ensure = %q, %v; want %q", got, err, kas)
	}
}

// With no go command, Ensure fails saying so and naming make k8s-apiserver.
func TestEnsureNoGo(t *testing.T) {
	mod := module(t, "v1.37.2")
	t.Setenv(kubebin.Env, filepath.Join(t.TempDir(), "kas"))
	t.Setenv("PATH", t.TempDir())
	_, err := kubebin.EnsureIn(mod, nil)
	if err == nil || !strings.Contains(err.Error(), "go command") || !strings.Contains(err.Error(), "make k8s-apiserver") {
		t.Errorf("Ensure without go = %v, want an error naming the go command and make k8s-apiserver", err)
	}
}

// A failed build leaves no binary, and its error carries the build's output
// and names make k8s-apiserver.
func TestEnsureBuildFails(t *testing.T) {
	mod := module(t, "v1.37.2")
	kas := filepath.Join(t.TempDir(), "kas")
	t.Setenv(kubebin.Env, kas)
	fakeGo(t, "echo 'cannot find module providing package' >&2\nexit 1\n")
	_, err := kubebin.EnsureIn(mod, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot find module providing package") || !strings.Contains(err.Error(), "make k8s-apiserver") {
		t.Errorf("Ensure of a failing build = %v, want the build's output and make k8s-apiserver", err)
	}
	if _, err := os.Stat(kas); !os.IsNotExist(err) {
		t.Errorf("after a failed build, stat %s = %v, want no file", kas, err)
	}
	left, _ := filepath.Glob(kas + ".tmp-*")
	if len(left) > 0 {
		t.Errorf("a failed build left %v", left)
	}
}

// Ensure builds with go build -o TEMP k8s.io/kubernetes/cmd/kube-apiserver
// in the module's folder, then renames: the binary appears whole. Calls made
// at once build once; the others wait and find the binary.
func TestEnsureBuildsOnce(t *testing.T) {
	mod := module(t, "v1.37.2")
	kas := filepath.Join(t.TempDir(), "cache", "kas")
	t.Setenv(kubebin.Env, kas)
	// The fake go logs its arguments and folder, takes its time so that
	// the calls overlap, and writes an executable to its -o argument.
	bin := fakeGo(t, `echo "$PWD $*" >> "$(dirname "$0")/builds"
case "$3" in *.tmp-*) ;; *) echo "not a temporary name: $3" >&2; exit 1;; esac
sleep 0.5
printf '#!/bin/sh\n' > "$3" && chmod +x "$3"
`)
	const calls = 4
	var wg sync.WaitGroup
	errs := make([]error, calls)
	paths := make([]string, calls)
	logs := make([][]string, calls)
	for i := range calls {
		wg.Go(func() {
			paths[i], errs[i] = kubebin.EnsureIn(mod, func(format string, args ...any) {
				logs[i] = append(logs[i], fmt.Sprintf(format, args...))
			})
		})
	}
	wg.Wait()
	for i := range calls {
		if errs[i] != nil || paths[i] != kas {
			t.Errorf("call %d: Ensure = %q, %v; want %q", i, paths[i], errs[i], kas)
		}
	}
	b, err := os.ReadFile(filepath.Join(bin, "builds"))
	if err != nil {
		t.Fatal(err)
	}
	builds := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(builds) != 1 {
		t.Fatalf("%d builds, want 1:\n%s", len(builds), b)
	}
	if want := mod + " build -o " + kas + ".tmp-"; !strings.HasPrefix(builds[0], want) || !strings.HasSuffix(builds[0], " k8s.io/kubernetes/cmd/kube-apiserver") {
		t.Errorf("the build ran %q, want %q...k8s.io/kubernetes/cmd/kube-apiserver", builds[0], want)
	}
	var said int
	for _, l := range logs {
		for _, f := range l {
			if strings.Contains(f, "building") && strings.Contains(f, "minutes") {
				said++
			}
		}
	}
	if said != 1 {
		t.Errorf("%d calls said they build and how long it takes, want 1", said)
	}
}
