package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// A published is one module of the repository that users import: its
// directory, relative to the repository's root, its module path and the
// version it is tagged with next.
type published struct {
	Dir     string // "." for the root
	Path    string
	Version string
	GoMod   *modfile.File
}

// Tag is the tag that serves the module at its version: a nested module's
// tag is its directory and the version, as the go command looks it up.
func (p published) Tag() string {
	if p.Dir == "." {
		return p.Version
	}
	return p.Dir + "/" + p.Version
}

// readVersions reads versions.txt at root: a line a module, its directory
// and its next version, "#" starting a comment. The root module is listed
// first in the result.
func readVersions(root string) ([]published, error) {
	const name = "versions.txt"
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		return nil, err
	}
	var mods []published
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want a directory and a version, got %q", name, n, sc.Text())
		}
		dir, version := filepath.ToSlash(filepath.Clean(fields[0])), fields[1]
		if !semver.IsValid(version) || semver.Canonical(version) != version {
			return nil, fmt.Errorf("%s:%d: %q is not a canonical semantic version such as v0.1.0", name, n, version)
		}
		if seen[dir] {
			return nil, fmt.Errorf("%s:%d: %s listed twice", name, n, dir)
		}
		seen[dir] = true
		gomod := filepath.Join(root, dir, "go.mod")
		src, err := os.ReadFile(gomod)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s is not a module: %v", name, n, dir, err)
		}
		f, err := modfile.Parse(gomod, src, nil)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s has no module line", gomod)
		}
		p := published{Dir: dir, Path: f.Module.Mod.Path, Version: version, GoMod: f}
		if err := module.Check(p.Path, p.Version); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, n, err)
		}
		if dir == "." {
			mods = append([]published{p}, mods...)
		} else {
			mods = append(mods, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(mods) == 0 || mods[0].Dir != "." {
		return nil, fmt.Errorf("%s does not list the root module (\".\")", name)
	}
	for _, p := range mods[1:] {
		if want := mods[0].Path + "/" + p.Dir; p.Path != want {
			return nil, fmt.Errorf("%s/go.mod names the module %s; a tag %s serves %s", p.Dir, p.Path, p.Tag(), want)
		}
	}
	return mods, nil
}
