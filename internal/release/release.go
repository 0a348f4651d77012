package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/semver"
)

// release makes the working tree into the release version: versions.txt
// and every published nested module's require of the root, or of another
// published module, name version,
// go mod tidy runs where a go.mod changed, the API records are checked and
// then rewritten to this release's API, and the install check runs. It
// prints each file it changes and the tags to push; it commits, tags and
// pushes nothing.
func release(root, version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("release: VERSION=%q is not a canonical semantic version such as v0.1.0", version)
	}
	mods, err := readVersions(root)
	if err != nil {
		return err
	}
	if err := setVersions(root, version); err != nil {
		return err
	}
	fmt.Printf("release: versions.txt: every module at %s\n", version)
	for _, p := range mods[1:] {
		// The root, and any other published module p requires, such as
		// ctrllease's k8slease: all are released together.
		var edits, names []string
		for _, q := range mods {
			if q.Path != p.Path && requiredVersion(p, q.Path) != "" {
				edits = append(edits, "-require="+q.Path+"@"+version)
				names = append(names, q.Path)
			}
		}
		if len(edits) == 0 {
			continue
		}
		dir := filepath.Join(root, p.Dir)
		before, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			return err
		}
		if err := run(dir, nil, "go", append([]string{"mod", "edit"}, edits...)...); err != nil {
			return err
		}
		if err := run(dir, nil, "go", "mod", "tidy"); err != nil {
			return err
		}
		after, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			return err
		}
		if !bytes.Equal(before, after) {
			fmt.Printf("release: %s/go.mod: requires %s %s (go mod tidy run)\n", p.Dir, strings.Join(names, ", "), version)
		}
	}
	// The records are the API of the last release: a break since then
	// fails here first, so that the release notes can say it.
	if err := apiCheck(root, false); err != nil {
		return fmt.Errorf("%v\nrelease: a break needs its record updated (make apicheck-update) in a commit of its own before the release", err)
	}
	if err := apiCheck(root, true); err != nil {
		return err
	}
	if err := installCheck(root); err != nil {
		return err
	}
	mods, err = readVersions(root)
	if err != nil {
		return err
	}
	var tags []string
	for _, p := range mods {
		tags = append(tags, p.Tag())
	}
	fmt.Printf(`release: %s is ready. Commit the files above (git status shows them), then tag that commit and push the tags:

	git commit -am "Release %s"
`, version, version)
	for _, t := range tags {
		fmt.Printf("\tgit tag %s\n", t)
	}
	fmt.Printf("\tgit push origin %s\n", strings.Join(tags, " "))
	return nil
}

// setVersions rewrites the version of every line of versions.txt, keeping
// its comments and layout.
func setVersions(root, version string) error {
	file := filepath.Join(root, "versions.txt")
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(data), "\n")
	for i, line := range lines {
		body, comment, hasComment := strings.Cut(line, "#")
		fields := strings.Fields(body)
		if len(fields) != 2 {
			continue
		}
		at := strings.LastIndex(body, fields[1])
		body = body[:at] + version + body[at+len(fields[1]):]
		if hasComment {
			body += "#" + comment
		}
		lines[i] = body
	}
	return os.WriteFile(file, []byte(strings.Join(lines, "")), 0o644)
}
