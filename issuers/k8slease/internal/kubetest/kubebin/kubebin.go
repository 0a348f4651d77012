// Package kubebin finds, and builds when it is missing, the kube-apiserver
// binary that package kubetest runs: one binary for each version of
// k8s.io/kubernetes, kept in the user's cache folder, so that only the first
// run on a machine pays for the build.
//
// The version is the one the module in kubetest/apiserver requires; the
// binary is built from that module with the go command, so a machine needs
// only Go and the module proxy. The finding and the building are package
// gobin's, shared with the other servers the tests build.
package kubebin

import "github.com/zukhruf/lease/internal/gobin"

// Env names the environment variable that overrides [Path]: the file the
// binary is read from, and built into when it is missing.
const Env = "KUBE_APISERVER"

// bin is kube-apiserver, built from the module in ../apiserver.
var bin = gobin.Binary{
	Name:    "kube-apiserver",
	Module:  "k8s.io/kubernetes",
	Package: "k8s.io/kubernetes/cmd/kube-apiserver",
	Dir:     gobin.Beside("../apiserver"),
	Env:     Env,
	Make:    "k8s-apiserver",
	Took:    "a cold build takes 20 to 45 minutes on 2 cores, a rebuild from a warm Go build cache under a minute",
}

// ModuleDir returns the folder of the module that builds kube-apiserver,
// found beside this package's source.
func ModuleDir() (string, error) { return bin.ModuleDir() }

// Version returns the version of k8s.io/kubernetes that the module in
// dir requires, such as v1.37.2.
func Version(dir string) (string, error) { return bin.In(dir).Version() }

// Path returns where the binary of the module in dir is kept: the value of
// [Env] if it is set, else zukhruf-lease/kube-apiserver-VERSION in the
// user's cache folder ([os.UserCacheDir]). The file may not exist yet.
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
