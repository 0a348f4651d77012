package pgserver_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/internal/testservers/pgserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestMissingBinaryNamesThePackage checks that a machine without
// PostgreSQL's binaries gets an error that says what to install.
func TestMissingBinaryNamesThePackage(t *testing.T) {
	t.Setenv("PGBIN", t.TempDir())
	_, err := pgserver.Start()
	if err == nil || !strings.Contains(err.Error(), "install the Debian package postgresql") {
		t.Errorf("Start without the binaries = %v, want an error naming the package postgresql", err)
	}
}

// TestStartStopRestartClose runs a server through its life: it serves on
// its address and socket, stops, starts again on the same port with its
// data, and leaves neither a process nor its folder after Close.
func TestStartStopRestartClose(t *testing.T) {
	s, err := pgserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	query := func(addr, q string) {
		t.Helper()
		c, err := s.Connect(ctx, addr)
		if err != nil {
			t.Fatalf("connect through %s: %v", addr, err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	query(s.Addr(), "create table kept (x int)")
	query(s.Socket(), "select 1")
	pid := s.PID()
	if err := s.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("postmaster %d still runs after Stop", pid)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	query(s.Addr(), "select * from kept")
	pid = s.PID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("postmaster %d still runs after Close", pid)
	}
	if _, err := os.Stat(s.Socket()); !os.IsNotExist(err) {
		t.Errorf("the server's folder is still there after Close: %v", err)
	}
}

// TestMissingBouncerNamesThePackage checks that a machine without PgBouncer
// gets an error that says what to install.
func TestMissingBouncerNamesThePackage(t *testing.T) {
	t.Setenv("PGBOUNCER", t.TempDir()+"/pgbouncer")
	if err := pgserver.CheckBouncer(); err == nil || !strings.Contains(err.Error(), "install the Debian package pgbouncer") {
		t.Errorf("CheckBouncer without the binary = %v, want an error naming the package pgbouncer", err)
	}
}
