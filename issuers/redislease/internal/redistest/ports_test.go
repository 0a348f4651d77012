package redistest

// An internal test: the reservation of ports has no exported surface.

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the child of TestPortHeldAcrossProcesses when the test
// binary is started as one, and the tests otherwise.
func TestMain(m *testing.M) {
	if p := os.Getenv("REDISTEST_LOCK_PORT"); p != "" {
		reservePort() // opens the shared file
		n, _ := strconv.Atoi(p)
		fmt.Println(lockPort(n, syscall.F_WRLCK))
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// tryLock says whether another process can lock port p's byte.
func tryLock(t *testing.T, p int) bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REDISTEST_LOCK_PORT="+strconv.Itoa(p))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out)) == "true"
}

// TestPortHeldAcrossProcesses: a reserved port and its bus port are
// another process's to take only once released, and are never in the
// kernel's ephemeral range.
func TestPortHeldAcrossProcesses(t *testing.T) {
	p, err := reservePort()
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := portRange()
	if p < lo || p >= hi {
		t.Errorf("port %d outside [%d, %d)", p, lo, hi)
	}
	for _, q := range []int{p, p + busOffset} {
		if tryLock(t, q) {
			t.Errorf("another process locked the reserved port %d", q)
		}
	}
	releasePort(p)
	for _, q := range []int{p, p + busOffset} {
		if !tryLock(t, q) {
			t.Errorf("another process could not lock the released port %d", q)
		}
	}
}
