package s3test

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

// Env names the environment variable that overrides [Path]: the file the
// versitygw binary is read from, and built into when it is missing.
const Env = "VERSITYGW"

// pkg is what the go command builds.
const pkg = "github.com/versity/versitygw/cmd/versitygw"

// ModuleDir returns the folder of the module that builds versitygw, found
// beside this package's source.
func ModuleDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("s3test: cannot find the source folder of package s3test")
	}
	dir := filepath.Join(filepath.Dir(file), "versitygw")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("s3test: the module that builds versitygw is not beside package s3test's source (set %s to a built binary): %w", Env, err)
	}
	return filepath.Clean(dir), nil
}

// Version returns the version of github.com/versity/versitygw that the
// module in dir requires, such as v1.8.0.
func Version(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "github.com/versity/versitygw" && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("s3test: %s requires no version of github.com/versity/versitygw", filepath.Join(dir, "go.mod"))
}

// Path returns where the binary of the module in dir is kept: the value of
// [Env] if it is set, else zukhruf-lease/versitygw-VERSION in the user's
// cache folder. The file may not exist yet.
func Path(dir string) (string, error) {
	if p := os.Getenv(Env); p != "" {
		return filepath.Abs(p)
	}
	v, err := Version(dir)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("s3test: no cache folder for the binary (set %s): %w", Env, err)
	}
	return filepath.Join(cache, "zukhruf-lease", "versitygw-"+v), nil
}

// Ensure returns the path of the versitygw binary (see [Path]), building it
// first if it is missing. A build writes to a temporary name and renames
// it, under a lock on path+".lock", so that processes that need the binary
// at once build it once. Ensure calls logf, if not nil, before a build and
// before a wait for another process's build.
func Ensure(logf func(format string, args ...any)) (string, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if p := os.Getenv(Env); p != "" && executable(p) {
		return filepath.Abs(p)
	}
	dir, err := ModuleDir()
	if err != nil {
		return "", err
	}
	path, err := Path(dir)
	if err != nil {
		return "", err
	}
	if executable(path) {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	unlock, err := lock(path+".lock", logf)
	if err != nil {
		return "", err
	}
	defer unlock()
	if executable(path) {
		return path, nil // another process built it while we waited
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("s3test: versitygw is not built (%s) and the go command that builds it is not found: %w; install Go, then run make s3-versitygw", path, err)
	}
	logf("s3test: building %s into %s (make s3-versitygw does it ahead; a cold build takes minutes)", pkg, path)
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	defer os.Remove(tmp)
	cmd := exec.Command(gobin, "build", "-o", tmp, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("s3test: build versitygw in %s: %w: %s", dir, err, tail(out, 20))
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	return path, nil
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// lock takes an exclusive lock on the file name, waiting for the process
// that holds it; the kernel releases the lock of a process that dies.
func lock(name string, logf func(string, ...any)) (unlock func(), err error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("s3test: lock %s: %w", name, err)
		}
		logf("s3test: waiting for another process's build of versitygw (it holds %s)", name)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("s3test: lock %s: %w", name, err)
		}
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
