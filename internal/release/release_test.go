package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo writes a repository of files into a temporary folder.
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		file := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	rootMod = "module example.com/lease\n\ngo 1.25\n"
	nested  = "module example.com/lease/issuers/etcdlease\n\ngo 1.26.0\n\nrequire example.com/lease v0.1.0\n\nreplace example.com/lease => ../..\n"
)

func TestReadVersions(t *testing.T) {
	root := repo(t, map[string]string{
		"go.mod":                   rootMod,
		"issuers/etcdlease/go.mod": nested,
		"versions.txt":             "# comment\nissuers/etcdlease v0.1.0 # next\n. v0.1.0\n",
	})
	mods, err := readVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 2 || mods[0].Dir != "." || mods[1].Dir != "issuers/etcdlease" {
		t.Fatalf("readVersions = %+v, want the root first, then issuers/etcdlease", mods)
	}
	if got, want := mods[1].Tag(), "issuers/etcdlease/v0.1.0"; got != want {
		t.Errorf("Tag() = %q, want %q", got, want)
	}
	if got, want := mods[0].Tag(), "v0.1.0"; got != want {
		t.Errorf("Tag() of the root = %q, want %q", got, want)
	}
}

func TestReadVersionsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, versions, want string
		files                map[string]string
	}{
		{name: "no root", versions: "issuers/etcdlease v0.1.0\n", want: `does not list the root module`},
		{name: "not canonical", versions: ". v0.1\n", want: `"v0.1" is not a canonical semantic version`},
		{name: "twice", versions: ". v0.1.0\n. v0.1.0\n", want: "listed twice"},
		{name: "not a module", versions: ". v0.1.0\nsignalcancel v0.1.0\n", want: "signalcancel is not a module"},
		{name: "wrong module path", versions: ". v0.1.0\nother v0.1.0\n", want: "other/go.mod names the module example.com/elsewhere",
			files: map[string]string{"other/go.mod": "module example.com/elsewhere\n"}},
		{name: "major version", versions: ". v2.0.0\n", want: "invalid version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{
				"go.mod":                   rootMod,
				"issuers/etcdlease/go.mod": nested,
				"versions.txt":             tc.versions,
			}
			for k, v := range tc.files {
				files[k] = v
			}
			_, err := readVersions(repo(t, files))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("readVersions error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckRequiresNamesTheUnpublishedVersion(t *testing.T) {
	root := repo(t, map[string]string{
		"go.mod":                   rootMod,
		"issuers/etcdlease/go.mod": strings.Replace(nested, "v0.1.0", "v0.0.0-00010101000000-000000000000", 1),
		"versions.txt":             ". v0.1.0\nissuers/etcdlease v0.1.0\n",
	})
	mods, err := readVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	// GOPROXY=off: nothing is published anywhere.
	err = checkRequires(mods, append(os.Environ(), "GOPROXY=off"))
	want := "issuers/etcdlease requires example.com/lease v0.0.0-00010101000000-000000000000, which is neither the version this release makes (v0.1.0, versions.txt) nor published"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("checkRequires = %v, want an error containing %q", err, want)
	}

	mods[1].GoMod.Require[0].Mod.Version = "v0.1.0"
	if err := checkRequires(mods, append(os.Environ(), "GOPROXY=off")); err != nil {
		t.Fatalf("checkRequires with the release's version = %v, want nil", err)
	}
}

func TestSetVersionsKeepsLayout(t *testing.T) {
	root := repo(t, map[string]string{
		"versions.txt": "# the next versions\n.             v0.1.0\nsignalcancel  v0.1.0  # the analyzer\n",
	})
	if err := setVersions(root, "v0.2.0"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "versions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# the next versions\n.             v0.2.0\nsignalcancel  v0.2.0  # the analyzer\n"
	if string(got) != want {
		t.Errorf("versions.txt = %q, want %q", got, want)
	}
}

func TestReleaseRefusesABadVersion(t *testing.T) {
	err := release(t.TempDir(), "0.1.0")
	if err == nil || !strings.Contains(err.Error(), `VERSION="0.1.0" is not a canonical semantic version`) {
		t.Fatalf("release(0.1.0) = %v, want the version refused", err)
	}
}

// TestRecordsArePublishedModules keeps testdata/api in step with
// versions.txt: a published module without a record, or a record of a
// module no longer published, fails here before apicheck runs.
func TestRecordsArePublishedModules(t *testing.T) {
	mods, err := readVersions("../..")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range mods {
		want[filepath.Base(recordFile("../..", p))] = true
		if _, err := os.Stat(recordFile("../..", p)); err != nil {
			t.Errorf("%s has no API record: run make apicheck-update (%v)", p.Path, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join("../..", recordDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("%s/%s records no module of versions.txt", recordDir, e.Name())
		}
	}
}

// TestAPICheckNamesABreak records a module's API, breaks it, and wants
// apicheck to fail naming the change; an addition passes, and the updated
// record accepts the break.
func TestAPICheckNamesABreak(t *testing.T) {
	root := repo(t, map[string]string{
		"go.mod":          rootMod,
		"versions.txt":    ". v0.1.0\n",
		"a/a.go":          "package a\n\nfunc F() {}\n",
		"internal/i/i.go": "package i\n\nfunc G() {}\n",
	})
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := apiCheck(root, true); err != nil {
		t.Fatalf("apicheck -update: %v", err)
	}
	if err := apiCheck(root, false); err != nil {
		t.Fatalf("apicheck of the recorded API = %v, want nil", err)
	}

	write("a/a.go", "package a\n\nfunc F() {}\n\nfunc H() {}\n")
	write("internal/i/i.go", "package i\n\nfunc G(int) {}\n")
	if err := apiCheck(root, false); err != nil {
		t.Fatalf("apicheck after an addition and an internal change = %v, want nil", err)
	}

	write("a/a.go", "package a\n\nfunc F(int) {}\n")
	err := apiCheck(root, false)
	want := "./a.F: changed from func() to func(int)"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "make apicheck-update") {
		t.Fatalf("apicheck after a break = %v, want an error naming %q and the way to record it", err, want)
	}

	if err := apiCheck(root, true); err != nil {
		t.Fatalf("apicheck -update: %v", err)
	}
	if err := apiCheck(root, false); err != nil {
		t.Fatalf("apicheck after the record was updated = %v, want nil", err)
	}
}

// TestInstallCheckSeesNewFiles runs the install check twice on a module
// whose files change in between at the same version, as they do from one
// commit to the next: the second run must build the new files, not what the
// go command remembers of the version's folder from the first.
func TestInstallCheckSeesNewFiles(t *testing.T) {
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOCACHE", strings.TrimSpace(string(out)))
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the check's own module cache
	root := repo(t, map[string]string{
		"go.mod":       rootMod,
		"versions.txt": ". v0.1.0\n",
		"a/a.go":       "package a\n\nimport \"strings\"\n\nfunc F(s string) bool { return strings.HasPrefix(s, \"a\") }\n",
	})
	if err := installCheck(root); err != nil {
		t.Fatalf("install check: %v", err)
	}
	a := "package a\n\nimport \"unicode/utf8\"\n\nfunc F(s string) bool { return utf8.ValidString(s) }\n"
	if err := os.WriteFile(filepath.Join(root, "a", "a.go"), []byte(a), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := installCheck(root); err != nil {
		t.Fatalf("install check after a change: %v", err)
	}
}
