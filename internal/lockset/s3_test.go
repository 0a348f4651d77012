package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The runs' versitygw is the one s3lease's tests keep in the user's cache
// folder, of the version their module pins, unless VERSITYGW names another.
func TestVersitygwCommand(t *testing.T) {
	if _, err := os.Stat(filepath.Join(versitygw.Dir, "go.mod")); err != nil {
		t.Fatalf("versitygw's module folder: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "versitygw")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VERSITYGW", bin)
	cmd, err := versitygwCommand(t.TempDir(), 9000)
	if err != nil || cmd.Path != bin {
		t.Errorf("versitygwCommand with VERSITYGW=%s = %v, %v; want it to run %s", bin, cmd, err, bin)
	}
	t.Setenv("VERSITYGW", "")
	path, err := versitygw.Path()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if dir, name := filepath.Split(path); dir != filepath.Join(cache, "zukhruf-lease")+"/" || !strings.HasPrefix(name, "versitygw-v") {
		t.Errorf("versitygw's path = %s, want zukhruf-lease/versitygw-VERSION under %s", path, cache)
	}
}
