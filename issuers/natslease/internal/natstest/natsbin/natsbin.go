// Package natsbin finds, and builds when it is missing, the nats-server
// binary that package natstest runs: one binary for each version of
// github.com/nats-io/nats-server/v2, kept in the user's cache folder, so that
// only the first run on a machine pays for the build.
//
// The version is the one the module in natstest/server requires; the binary
// is built from that module with the go command, so a machine needs only Go
// and the module proxy.
package natsbin

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
// binary is read from, and built into when it is missing.
const Env = "NATS_SERVER"

// pkg is what the go command builds.
const pkg = "github.com/nats-io/nats-server/v2"

// ModuleDir returns the folder of the module that builds nats-server, found
// beside this package's source.
func ModuleDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("natsbin: cannot find the source folder of package natsbin")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "server")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		// A binary built with -trimpath knows no source folder.
		return "", fmt.Errorf("natsbin: the module that builds nats-server is not beside package natsbin's source (set %s to a built binary): %w", Env, err)
	}
	return filepath.Clean(dir), nil
}

// Version returns the version of nats-server that the module in dir
// requires, such as v2.15.3.
func Version(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("natsbin: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == pkg && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("natsbin: %s requires no version of %s", filepath.Join(dir, "go.mod"), pkg)
}

// Path returns where the binary of the module in dir is kept: the value of
// [Env] if it is set, else zukhruf-lease/nats-server-VERSION in the user's
// cache folder ([os.UserCacheDir]). The file may not exist yet.
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
		return "", fmt.Errorf("natsbin: no cache folder for the binary (set %s): %w", Env, err)
	}
	return filepath.Join(cache, "zukhruf-lease", "nats-server-"+v), nil
}

// Ensure returns the path of the binary (see [Path]), building it first if
// it is missing. A build writes to a temporary name beside the binary and
// renames it, under a lock on the file path+".lock", so that processes that
// need the binary at once (two test binaries, a test and make) build it
// once, the others waiting for it. Ensure calls logf, if it is not nil,
// before a build and before a wait for another process's build.
func Ensure(logf func(format string, args ...any)) (string, error) {
	dir, err := ModuleDir()
	if err != nil {
		return "", err
	}
	return ensure(dir, logf)
}

func ensure(dir string, logf func(format string, args ...any)) (string, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	path, err := Path(dir)
	if err != nil {
		return "", err
	}
	if executable(path) {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("natsbin: %w", err)
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
		return "", fmt.Errorf("natsbin: nats-server is not built (%s) and the go command that builds it is not found: %w; install Go, then run make nats-server", path, err)
	}
	logf("natsbin: building %s into %s: a cold build takes a few minutes on 2 cores (make nats-server does it ahead)", pkg, path)
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	defer os.Remove(tmp)
	cmd := exec.Command(gobin, "build", "-o", tmp, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("natsbin: build nats-server in %s: %w: %s; run make nats-server to see the whole build", dir, err, tail(out, 20))
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("natsbin: %w", err)
	}
	return path, nil
}

// executable reports whether path is a regular file someone may run.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// lock takes an exclusive lock on the file name, waiting for the process
// that holds it, and returns the function that releases it. The kernel
// releases the lock of a process that dies.
func lock(name string, logf func(string, ...any)) (unlock func(), err error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("natsbin: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("natsbin: lock %s: %w", name, err)
		}
		logf("natsbin: waiting for another process's build of nats-server (it holds %s)", name)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("natsbin: lock %s: %w", name, err)
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
