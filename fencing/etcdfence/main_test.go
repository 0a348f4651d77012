package etcdfence_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/fencing/etcdfence/internal/etcdserver"
	"github.com/zukhruf/lease/fencingtest"
)

// addr is the shared member's endpoint, empty in a child process of
// fencingtest, which is passed the parent's.
var addr string

// TestMain starts an etcd member in the process and stops it after the
// tests; then no goroutine may be left, in this package or in etcd's.
func TestMain(m *testing.M) {
	code := 0
	if fencingtest.Child() {
		code = m.Run()
	} else {
		dir, err := os.MkdirTemp("", "etcdfence-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		s, err := etcdserver.Start(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		addr = s.Endpoint()
		code = m.Run()
		s.Close()
		_ = os.RemoveAll(dir)
	}
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}
