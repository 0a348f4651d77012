package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The runs' nats-server is the one natslease's tests keep in the user's
// cache folder, of the version their module pins, unless NATS_SERVER names
// another.
func TestNatsCommand(t *testing.T) {
	if _, err := os.Stat(filepath.Join(natsServer.Dir, "go.mod")); err != nil {
		t.Fatalf("nats-server's module folder: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_SERVER", bin)
	cmd, err := natsCommand(t.TempDir(), 4222)
	if err != nil || cmd.Path != bin {
		t.Errorf("natsCommand with NATS_SERVER=%s = %v, %v; want it to run %s", bin, cmd, err, bin)
	}
	t.Setenv("NATS_SERVER", "")
	path, err := natsServer.Path()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if dir, name := filepath.Split(path); dir != filepath.Join(cache, "zukhruf-lease")+"/" || !strings.HasPrefix(name, "nats-server-v2.") {
		t.Errorf("nats-server's path = %s, want zukhruf-lease/nats-server-VERSION under %s", path, cache)
	}
}
