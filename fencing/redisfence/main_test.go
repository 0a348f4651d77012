package redisfence_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/fencing/redisfence/internal/redisserver"
	"github.com/zukhruf/lease/fencingtest"
)

// addr is the shared server's address, empty in a child process of
// fencingtest, which is passed the parent's.
var addr string

// TestMain starts a redis-server and stops it after the tests; then no
// goroutine may be left.
func TestMain(m *testing.M) {
	code := 0
	if fencingtest.Child() {
		code = m.Run()
	} else {
		s, err := redisserver.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err) // a missing binary fails the tests, naming the package to install
			os.Exit(1)
		}
		addr = s.Addr()
		code = m.Run()
		if err := s.Close(); err != nil && code == 0 {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}
