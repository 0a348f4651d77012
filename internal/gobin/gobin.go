// Package gobin finds, and builds when it is missing, a server binary that
// the tests of this repository run: a command built with the go command from
// a module that a folder beside the caller's source pins, one binary for each
// version of that module, kept in the user's cache folder, so that only the
// first run on a machine pays for the build.
//
// A machine needs only Go and the module proxy; an environment variable of
// each binary names a file to use instead.
package gobin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// A Binary describes one command built from a Go module: kube-apiserver from
// k8s.io/kubernetes, nats-server, versitygw. Its zero value describes
// nothing: its methods return an error that names the missing field.
//
// A Binary is a value; its methods change nothing in it, and many
// goroutines may call them at once.
type Binary struct {
	// Name is the command's name. The binary is kept as
	// zukhruf-lease/Name-VERSION in the user's cache folder.
	Name string
	// Module is the path of the module whose version the module in Dir
	// requires, such as k8s.io/kubernetes; that version keys the cache.
	Module string
	// Package is what the go command builds, such as
	// k8s.io/kubernetes/cmd/kube-apiserver.
	Package string
	// Dir is the folder of the module that pins Module and builds
	// Package, usually [Beside] the caller's source.
	Dir string
	// Env names the environment variable that overrides [Binary.Path]:
	// the file the binary is read from, and built into when it is missing.
	Env string
	// Make names the make target that builds the binary ahead; errors and
	// the message before a build name it. Optional.
	Make string
	// Took says how long a cold build takes, in the message before a
	// build. Optional.
	Took string
}

// Beside returns the folder rel, relative to the folder of the source file
// that calls Beside, or "" when that file's folder is not known (a binary
// built with -trimpath); [Binary.ModuleDir] then says so.
func Beside(rel string) string {
	_, file, _, ok := runtime.Caller(1)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	return filepath.Join(filepath.Dir(file), rel)
}

// In returns a copy of b whose module is the one in dir.
func (b Binary) In(dir string) Binary {
	b.Dir = dir
	return b
}

// check reports the first field that b lacks.
func (b Binary) check() error {
	switch {
	case b.Name == "":
		return errors.New("gobin: a Binary without a Name")
	case b.Module == "":
		return fmt.Errorf("gobin: the Binary %s has no Module", b.Name)
	case b.Package == "":
		return fmt.Errorf("gobin: the Binary %s has no Package", b.Name)
	}
	return nil
}

// setHint is what an error adds when Dir cannot be used: the variable that
// names a built binary instead.
func (b Binary) setHint() string {
	if b.Env == "" {
		return ""
	}
	return fmt.Sprintf(" (set %s to a built binary)", b.Env)
}

// ModuleDir returns b.Dir, cleaned, if it holds a go.mod.
func (b Binary) ModuleDir() (string, error) {
	if err := b.check(); err != nil {
		return "", err
	}
	if b.Dir == "" {
		return "", fmt.Errorf("gobin: the folder of the module that builds %s is not known: its caller's source folder is not known (built with -trimpath?)%s", b.Name, b.setHint())
	}
	if _, err := os.Stat(filepath.Join(b.Dir, "go.mod")); err != nil {
		return "", fmt.Errorf("gobin: the module that builds %s is not in %s%s: %w", b.Name, b.Dir, b.setHint(), err)
	}
	return filepath.Clean(b.Dir), nil
}

// Version returns the version of b.Module that the module in b.Dir
// requires, such as v1.37.2.
func (b Binary) Version() (string, error) {
	dir, err := b.ModuleDir()
	if err != nil {
		return "", err
	}
	gomod := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("gobin: %w", err)
	}
	if v, ok := required(data, b.Module); ok {
		return v, nil
	}
	return "", fmt.Errorf("gobin: %s requires no version of %s", gomod, b.Module)
}

// required returns the version at which the go.mod in data requires
// module, reading only its require lines and blocks: a replace or exclude
// of the module says nothing of the version built.
func required(data []byte, module string) (string, bool) {
	inRequire, inBlock := false, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case inBlock && f[0] == ")":
			inRequire, inBlock = false, false
			continue
		case inBlock && !inRequire:
			continue
		case !inBlock && len(f) == 2 && f[1] == "(":
			inRequire, inBlock = f[0] == "require", true
			continue
		case !inBlock && f[0] == "require":
			f = f[1:]
		case !inBlock:
			continue
		}
		if len(f) >= 2 && f[0] == module && strings.HasPrefix(f[1], "v") {
			return f[1], true
		}
	}
	return "", false
}

// Path returns where the binary is kept: the value of b.Env if it is set,
// else zukhruf-lease/Name-VERSION in the user's cache folder
// ([os.UserCacheDir]), VERSION from [Binary.Version]. The file may not
// exist yet.
func (b Binary) Path() (string, error) {
	if err := b.check(); err != nil {
		return "", err
	}
	if p := b.override(); p != "" {
		return filepath.Abs(p)
	}
	v, err := b.Version()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("gobin: no cache folder for %s%s: %w", b.Name, b.setHint(), err)
	}
	return filepath.Join(cache, "zukhruf-lease", b.Name+"-"+v), nil
}

// override returns the value of b.Env, "" if it names none.
func (b Binary) override() string {
	if b.Env == "" {
		return ""
	}
	return os.Getenv(b.Env)
}

// Ensure returns the path of the binary (see [Binary.Path]), building it
// first if it is missing. A file that b.Env names and that may be run is
// returned as it is, even where b.Dir holds no module. A build writes to a
// temporary name beside the binary and renames it, under a lock on the file
// path+".lock", so that processes that need the binary at once (two test
// binaries, a test and make) build it once, the others waiting for it.
// Ensure calls logf, if it is not nil, before a build and before a wait for
// another process's build.
func (b Binary) Ensure(logf func(format string, args ...any)) (string, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := b.check(); err != nil {
		return "", err
	}
	if p := b.override(); p != "" {
		if abs, err := filepath.Abs(p); err == nil && executable(abs) {
			return abs, nil
		}
	}
	dir, err := b.ModuleDir()
	if err != nil {
		return "", err
	}
	path, err := b.Path()
	if err != nil {
		return "", err
	}
	if executable(path) {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("gobin: %w", err)
	}
	unlock, err := lock(path+".lock", b.Name, logf)
	if err != nil {
		return "", err
	}
	defer unlock()
	if executable(path) {
		return path, nil // another process built it while we waited
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("gobin: %s is not built (%s) and the go command that builds it is not found: %w; install Go%s", b.Name, path, err, b.then("then run make %s"))
	}
	logf("gobin: building %s into %s%s%s", b.Package, path, b.took(), b.then("make %s does it ahead"))
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	defer os.Remove(tmp)
	cmd := exec.Command(gocmd, "build", "-o", tmp, b.Package)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gobin: build %s in %s: %w: %s%s", b.Name, dir, err, tail(out, 20), b.then("run make %s to see the whole build"))
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("gobin: %w", err)
	}
	return path, nil
}

// then returns "; " and format with b.Make, or "" without a make target.
func (b Binary) then(format string) string {
	if b.Make == "" {
		return ""
	}
	return "; " + fmt.Sprintf(format, b.Make)
}

// took returns ": " and b.Took, or "".
func (b Binary) took() string {
	if b.Took == "" {
		return ""
	}
	return ": " + b.Took
}

// executable reports whether path is a regular file someone may run.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// lock takes an exclusive lock on the file name, waiting for the process
// that holds it, and returns the function that releases it. The kernel
// releases the lock of a process that dies. A lock is one of an open file,
// so two goroutines of one process wait for each other too.
func lock(name, what string, logf func(string, ...any)) (unlock func(), err error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("gobin: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("gobin: lock %s: %w", name, err)
		}
		logf("gobin: waiting for another process's build of %s (it holds %s)", what, name)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("gobin: lock %s: %w", name, err)
		}
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
