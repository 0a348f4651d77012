package s3test

import (
	"strings"

	"github.com/zukhruf/lease/internal/gobin"
)

// Env names the environment variable that overrides [Path]: the file the
// versitygw binary is read from, and built into when it is missing.
const Env = "VERSITYGW"

// bin is versitygw, built from the module in versitygw beside this file by
// package gobin, which builds the other servers the tests run too.
var bin = gobin.Binary{
	Name:    "versitygw",
	Module:  "github.com/versity/versitygw",
	Package: "github.com/versity/versitygw/cmd/versitygw",
	Dir:     gobin.Beside("versitygw"),
	Env:     Env,
	Make:    "s3-versitygw",
	Took:    "a cold build takes minutes",
}

// ModuleDir returns the folder of the module that builds versitygw, found
// beside this package's source.
func ModuleDir() (string, error) { return bin.ModuleDir() }

// Version returns the version of github.com/versity/versitygw that the
// module in dir requires, such as v1.8.0.
func Version(dir string) (string, error) { return bin.In(dir).Version() }

// Path returns where the binary of the module in dir is kept: the value of
// [Env] if it is set, else zukhruf-lease/versitygw-VERSION in the user's
// cache folder. The file may not exist yet.
func Path(dir string) (string, error) { return bin.In(dir).Path() }

// Ensure returns the path of the versitygw binary (see [Path]), building it
// first if it is missing ([gobin.Binary.Ensure]): once, under a lock file,
// however many processes need it at once. Ensure calls logf, if not nil,
// before a build and before a wait for another process's build.
func Ensure(logf func(format string, args ...any)) (string, error) {
	return bin.Ensure(logf)
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
