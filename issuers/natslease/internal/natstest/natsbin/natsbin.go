// Package natsbin finds, and builds when it is missing, the nats-server
// binary that package natstest runs: one binary for each version of
// github.com/nats-io/nats-server/v2, kept in the user's cache folder, so that
// only the first run on a machine pays for the build.
//
// The version is the one the module in natstest/server requires; the binary
// is built from that module with the go command, so a machine needs only Go
// and the module proxy. The finding and the building are package gobin's,
// shared with the other servers the tests build.
package natsbin

import "github.com/zukhruf/lease/internal/gobin"

// Env names the environment variable that overrides [Path]: the file the
// binary is read from, and built into when it is missing.
const Env = "NATS_SERVER"

// bin is nats-server, built from the module in ../server.
var bin = gobin.Binary{
	Name:    "nats-server",
	Module:  "github.com/nats-io/nats-server/v2",
	Package: "github.com/nats-io/nats-server/v2",
	Dir:     gobin.Beside("../server"),
	Env:     Env,
	Make:    "nats-server",
	Took:    "a cold build takes a few minutes on 2 cores",
}

// ModuleDir returns the folder of the module that builds nats-server, found
// beside this package's source.
func ModuleDir() (string, error) { return bin.ModuleDir() }

// Version returns the version of nats-server that the module in dir
// requires, such as v2.15.3.
func Version(dir string) (string, error) { return bin.In(dir).Version() }

// Path returns where the binary of the module in dir is kept: the value of
// [Env] if it is set, else zukhruf-lease/nats-server-VERSION in the user's
// cache folder ([os.UserCacheDir]). The file may not exist yet.
func Path(dir string) (string, error) { return bin.In(dir).Path() }

// Ensure returns the path of the binary (see [Path]), building it first if
// it is missing ([gobin.Binary.Ensure]): once, under a lock file, however
// many processes need it at once. Ensure calls logf, if it is not nil,
// before a build and before a wait for another process's build.
func Ensure(logf func(format string, args ...any)) (string, error) {
	return bin.Ensure(logf)
}

func ensure(dir string, logf func(format string, args ...any)) (string, error) {
	return bin.In(dir).Ensure(logf)
}
