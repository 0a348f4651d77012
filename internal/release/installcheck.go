package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// checkRequires fails, naming the module and the version, when a published
// module requires another published module at a version that this release
// does not make and that no proxy serves: a user's go get could never
// resolve it. The zero pseudo-version of a local replace is the usual case.
func checkRequires(mods []published, env []string) error {
	next := map[string]string{}
	for _, p := range mods {
		next[p.Path] = p.Version
	}
	var bad []string
	for _, p := range mods {
		for _, r := range p.GoMod.Require {
			v, ours := next[r.Mod.Path]
			if !ours || r.Mod.Version == v {
				continue
			}
			if servedElsewhere(r.Mod, env) {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s requires %s %s, which is neither the version this release makes (%s, versions.txt) nor published: set the require to %s (make release VERSION=%s does it)",
				p.Dir, r.Mod.Path, r.Mod.Version, v, v, v))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "\n"))
	}
	return nil
}

// servedElsewhere reports whether the usual proxy serves m.
func servedElsewhere(m module.Version, env []string) bool {
	cmd := exec.Command("go", "list", "-m", "-json", m.Path+"@"+m.Version)
	cmd.Dir = os.TempDir()
	cmd.Env = append(env, "GOFLAGS=-mod=mod", "GOWORK=off")
	return cmd.Run() == nil
}

// writeProxy writes each module, packaged from the working tree exactly as
// its tag would be served (nested modules left out, as zip.CreateFromDir
// does), into dir in the layout of a GOPROXY=file:// proxy.
func writeProxy(root, dir string, mods []published) error {
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mods[0].Version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for _, p := range mods {
		esc, err := module.EscapePath(p.Path)
		if err != nil {
			return err
		}
		at := filepath.Join(dir, esc, "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			return err
		}
		gomod, err := os.ReadFile(filepath.Join(root, p.Dir, "go.mod"))
		if err != nil {
			return err
		}
		files := map[string][]byte{
			p.Version + ".mod":  gomod,
			p.Version + ".info": []byte(strings.Replace(string(info), mods[0].Version, p.Version, 1)),
			"list":              []byte(p.Version + "\n"),
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
				return err
			}
		}
		z, err := os.Create(filepath.Join(at, p.Version+".zip"))
		if err != nil {
			return err
		}
		err = zip.CreateFromDir(z, module.Version{Path: p.Path, Version: p.Version}, filepath.Join(root, p.Dir))
		if cerr := z.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("packaging %s: %v", p.Dir, err)
		}
	}
	return nil
}

// installCheck packages every published module into a file proxy and, in a
// fresh module for each, does what a user does: go get it at its version,
// build every package of it, and run the analyzer with go run …@version.
// No replace and no workspace take part: the go command sees only what the
// tags would serve, in front of the usual proxy.
func installCheck(root string) error {
	mods, err := readVersions(root)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "install-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	base, err := goEnv()
	if err != nil {
		return err
	}
	if err := checkRequires(mods, base.environ()); err != nil {
		return err
	}
	proxy := filepath.Join(tmp, "proxy")
	if err := writeProxy(root, proxy, mods); err != nil {
		return err
	}
	modcache, err := checkModCache(mods[0].Path)
	if err != nil {
		return err
	}
	// The usual cache's downloads serve the other modules, so nothing
	// already downloaded is fetched again.
	env := append(base.environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(base.ModCache, "cache", "download"))+","+base.Proxy,
		"GOMODCACHE="+modcache,
		"GONOSUMDB="+mods[0].Path,
		"GOFLAGS=-mod=mod -modcacherw",
		"GOWORK=off",
		// The go command keeps an index of each module in the module
		// cache, keyed by its folder alone, since a version's files never
		// change there; this check repackages the same version with new
		// files, and the index would list the imports of the files before.
		"GODEBUG=goindex=0",
	)
	rootMod := mods[0]
	for i, p := range mods {
		work := filepath.Join(tmp, fmt.Sprintf("user%d", i))
		fmt.Printf("install-check: go get %s@%s\n", p.Path, p.Version)
		if err := userModule(work, env); err != nil {
			return err
		}
		if err := run(work, env, "go", "get", p.Path+"@"+p.Version); err != nil {
			return fmt.Errorf("go get %s@%s: %v", p.Path, p.Version, err)
		}
		if err := run(work, env, "go", "build", p.Path+"/..."); err != nil {
			return fmt.Errorf("%s@%s: go build %s/...: %v", p.Path, p.Version, p.Path, err)
		}
		// A module built against a root older than the newest must also
		// build against the newest, which a user's other requirements may
		// select: its packages may reach into the root's internal packages.
		if r := requiredVersion(p, rootMod.Path); p.Dir != "." && r != "" && r != rootMod.Version {
			fmt.Printf("install-check: %s with %s@%s (it requires %s)\n", p.Dir, rootMod.Path, rootMod.Version, r)
			if err := run(work, env, "go", "get", rootMod.Path+"@"+rootMod.Version); err != nil {
				return err
			}
			if err := run(work, env, "go", "build", p.Path+"/..."); err != nil {
				return fmt.Errorf("%s@%s with %s@%s: %v", p.Path, p.Version, rootMod.Path, rootMod.Version, err)
			}
		}
		if p.Dir == "signalcancel" {
			if err := runAnalyzer(work, env, rootMod, p); err != nil {
				return err
			}
		}
	}
	fmt.Printf("install-check: %d modules installable from their tags:", len(mods))
	for _, p := range mods {
		fmt.Printf(" %s", p.Tag())
	}
	fmt.Println()
	return nil
}

// runAnalyzer runs the analyzer as its doc says a user installs it, over a
// holder that drops a cancel, and wants the report.
func runAnalyzer(work string, env []string, rootMod, p published) error {
	holder := `package holder

import (
	"context"

	"github.com/zukhruf/lease/signal"
)

func Call(sig *signal.Signal) context.Context {
	ctx, _ := sig.Context(context.Background())
	return ctx
}
`
	if err := os.MkdirAll(filepath.Join(work, "holder"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "holder", "holder.go"), []byte(holder), 0o644); err != nil {
		return err
	}
	if err := run(work, env, "go", "get", rootMod.Path+"@"+rootMod.Version); err != nil {
		return err
	}
	pkg := p.Path + "/cmd/signalcancel@" + p.Version
	fmt.Printf("install-check: go run %s ./holder\n", pkg)
	cmd := exec.Command("go", "run", pkg, "./holder")
	cmd.Dir, cmd.Env = work, env
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "the cancel function returned by Signal.Context should be called, not discarded") {
		return fmt.Errorf("go run %s ./holder: want the dropped cancel reported, got %v:\n%s", pkg, err, out)
	}
	return nil
}

// checkModCache returns the module cache of the install check, kept in the
// user's cache folder from one run to the next, with every module of this
// repository removed from it: a copy packaged by an earlier check is never
// used, while the other modules keep their folders, so that the build cache
// still serves what was compiled from them (a fresh module cache would
// compile etcd and client-go again on every run).
func checkModCache(repo string) (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	modcache := filepath.Join(dir, "zukhruf-lease", "install-check-modcache")
	esc, err := module.EscapePath(repo)
	if err != nil {
		return "", err
	}
	stale, err := filepath.Glob(filepath.Join(modcache, filepath.FromSlash(esc)+"*"))
	if err != nil {
		return "", err
	}
	stale = append(stale, filepath.Join(modcache, "cache", "download", filepath.FromSlash(esc)))
	for _, path := range stale {
		if err := os.RemoveAll(path); err != nil {
			return "", fmt.Errorf("install-check: removing an earlier check's copy: %v", err)
		}
	}
	return modcache, nil
}

func userModule(dir string, env []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return run(dir, env, "go", "mod", "init", "example.com/user")
}

func requiredVersion(p published, path string) string {
	for _, r := range p.GoMod.Require {
		if r.Mod.Path == path {
			return r.Mod.Version
		}
	}
	return ""
}

type goEnvironment struct {
	ModCache, Proxy string
	env             []string
}

func goEnv() (goEnvironment, error) {
	out, err := exec.Command("go", "env", "-json", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return goEnvironment{}, fmt.Errorf("go env: %v", err)
	}
	var v struct{ GOMODCACHE, GOPROXY string }
	if err := json.Unmarshal(out, &v); err != nil {
		return goEnvironment{}, err
	}
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOFLAGS", "GOPROXY", "GOMODCACHE", "GONOSUMDB", "GOWORK", "GOPRIVATE", "GONOPROXY":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "GOPROXY="+v.GOPROXY)
	return goEnvironment{ModCache: v.GOMODCACHE, Proxy: v.GOPROXY, env: env}, nil
}

func (g goEnvironment) environ() []string { return append([]string(nil), g.env...) }

func run(dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	return nil
}
