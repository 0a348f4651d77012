package main

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// recordDir holds the recorded API of each published module, relative to
// the repository's root: the API of the last release, or of the first
// record before any.
const recordDir = "testdata/api"

// recordFile is the record of p: "lease.api" for the root, the directory
// with its slashes as dashes otherwise.
func recordFile(root string, p published) string {
	name := "lease"
	if p.Dir != "." {
		name = strings.ReplaceAll(p.Dir, "/", "-")
	}
	return filepath.Join(root, recordDir, name+".api")
}

// loadAPI type-checks the importable packages of p from the working tree:
// those under internal/ and commands are no part of its API.
func loadAPI(root string, fset *token.FileSet, p published) (*apidiff.Module, error) {
	cfg := &packages.Config{
		Dir:  filepath.Join(root, p.Dir),
		Fset: fset,
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Env:  append(os.Environ(), "GOWORK=off"),
	}
	loaded, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, fmt.Errorf("loading %s: %v", p.Dir, err)
	}
	m := &apidiff.Module{Path: p.Path}
	var errs []error
	for _, pkg := range loaded {
		if pkg.Name == "main" || isInternal(strings.TrimPrefix(pkg.PkgPath, p.Path)) {
			continue
		}
		for _, e := range pkg.Errors {
			errs = append(errs, e)
		}
		m.Packages = append(m.Packages, pkg.Types)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("loading %s: %v", p.Dir, err)
	}
	slices.SortFunc(m.Packages, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	return m, nil
}

func isInternal(rel string) bool {
	return rel == "/internal" || strings.HasPrefix(rel, "/internal/") || strings.Contains(rel, "/internal/") || strings.HasSuffix(rel, "/internal")
}

// writeRecord writes the export data of m's packages as a zip archive: an
// entry "module" with the module path and one entry for each package, its
// path and ".x" (the format of golang.org/x/exp/cmd/apidiff -m -w, so that
// apidiff itself reads it).
func writeRecord(file string, fset *token.FileSet, m *apidiff.Module) error {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	entry, err := w.Create("module")
	if err != nil {
		return err
	}
	io.WriteString(entry, m.Path)
	for _, pkg := range m.Packages {
		entry, err := w.Create(pkg.Path() + ".x")
		if err != nil {
			return err
		}
		if err := gcexportdata.Write(entry, fset, pkg); err != nil {
			return fmt.Errorf("writing %s: %v", pkg.Path(), err)
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

func readRecord(file string, fset *token.FileSet) (*apidiff.Module, error) {
	z, err := zip.OpenReader(file)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	m := &apidiff.Module{}
	for _, entry := range z.File {
		r, err := entry.Open()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		if entry.Name == "module" {
			m.Path = string(data)
			continue
		}
		path, ok := strings.CutSuffix(entry.Name, ".x")
		if !ok {
			return nil, fmt.Errorf("%s: unexpected entry %q", file, entry.Name)
		}
		pkg, err := gcexportdata.Read(bytes.NewReader(data), fset, map[string]*types.Package{}, path)
		if err != nil {
			return nil, fmt.Errorf("%s: reading %s: %v", file, path, err)
		}
		m.Packages = append(m.Packages, pkg)
	}
	return m, nil
}

// apiCheck compares each published module's API with its record and fails
// on any incompatible change, naming it. With update, it writes the records
// instead: the change is then part of the same commit, where a reviewer
// sees it.
func apiCheck(root string, update bool) error {
	mods, err := readVersions(root)
	if err != nil {
		return err
	}
	var failed []string
	for _, p := range mods {
		fset := token.NewFileSet()
		cur, err := loadAPI(root, fset, p)
		if err != nil {
			return err
		}
		file := recordFile(root, p)
		rel, _ := filepath.Rel(root, file)
		if update {
			if err := writeRecord(file, fset, cur); err != nil {
				return err
			}
			fmt.Printf("apicheck: recorded the API of %s in %s: %s\n", p.Path, rel, packageList(cur))
			continue
		}
		old, err := readRecord(file, token.NewFileSet())
		if errors.Is(err, os.ErrNotExist) {
			failed = append(failed, fmt.Sprintf("%s: no record of its API in %s: run make apicheck-update and commit it", p.Path, rel))
			continue
		}
		if err != nil {
			return err
		}
		report := apidiff.ModuleChanges(old, cur)
		var incompatible, compatible []string
		for _, c := range report.Changes {
			if c.Compatible {
				compatible = append(compatible, c.Message)
			} else {
				incompatible = append(incompatible, c.Message)
			}
		}
		for _, c := range compatible {
			fmt.Printf("apicheck: %s: compatible: %s\n", p.Dir, c)
		}
		if len(incompatible) > 0 {
			failed = append(failed, fmt.Sprintf("%s: incompatible with its recorded API (%s):\n\t%s\nIf the break is meant, run make apicheck-update and commit the record with the change; the release notes must say it.",
				p.Path, rel, strings.Join(incompatible, "\n\t")))
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "\n"))
	}
	if !update {
		fmt.Printf("apicheck: %d modules compatible with their records in %s\n", len(mods), recordDir)
	}
	return nil
}

// packageList names m's packages relative to the module, "." for its root.
func packageList(m *apidiff.Module) string {
	var names []string
	for _, pkg := range m.Packages {
		name := strings.TrimPrefix(strings.TrimPrefix(pkg.Path(), m.Path), "/")
		if name == "" {
			name = "."
		}
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}
