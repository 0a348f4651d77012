package natsbin

import (
	"os"
	"path/filepath"
	"testing"
)

// TestVersion reads the version from a go.mod written as go get writes it,
// and refuses one without nats-server.
func TestVersion(t *testing.T) {
	for _, c := range []struct {
		name, mod, want string
	}{
		{"block", "module m\n\nrequire (\n\tgithub.com/nats-io/nats-server/v2 v2.15.3 // indirect\n)\n", "v2.15.3"},
		{"line", "module m\n\nrequire github.com/nats-io/nats-server/v2 v2.14.9\n", "v2.14.9"},
		{"none", "module m\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(c.mod), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Version(dir)
			if c.want == "" {
				if err == nil {
					t.Errorf("Version() = %q, want an error", got)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("Version() = %q, %v, want %q", got, err, c.want)
			}
		})
	}
}

// TestPathEnv: the environment variable names the binary.
func TestPathEnv(t *testing.T) {
	t.Setenv(Env, "/some/nats-server")
	got, err := Path(t.TempDir())
	if err != nil || got != "/some/nats-server" {
		t.Errorf("Path() = %q, %v, want /some/nats-server", got, err)
	}
}

// TestEnsureFound: a binary already in place is returned without a build.
func TestEnsureFound(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nats-server")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(Env, bin)
	built := false
	got, err := ensure(t.TempDir(), func(string, ...any) { built = true })
	if err != nil || got != bin || built {
		t.Errorf("ensure() = %q, %v (build logged: %v), want %q without a build", got, err, built, bin)
	}
}

// TestPath: the module beside the source requires a version, and the binary
// is kept by it under the user's cache folder, where make nats-server put it.
func TestPath(t *testing.T) {
	dir, err := ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	v, err := Version(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(Env, "")
	if got, err := Path(dir); err != nil || got != filepath.Join(cache, "zukhruf-lease", "nats-server-"+v) {
		t.Errorf("Path() = %q, %v, want nats-server-%s under %s", got, err, v, cache)
	}
}
