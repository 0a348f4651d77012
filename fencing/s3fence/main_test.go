package s3fence_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/fencing/s3fence/internal/s3server"
	"github.com/zukhruf/lease/fencingtest"
)

// addr is the shared server's address, empty in a child process of
// fencingtest, which is passed the parent's.
var addr string

// bucket is the bucket of every resource of the tests.
const bucket = "fenced"

// TestMain starts a versitygw server and stops it after the tests; then no
// goroutine may be left.
func TestMain(m *testing.M) {
	code := 0
	if fencingtest.Child() {
		code = m.Run()
	} else {
		s, err := s3server.Start(bucket)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		addr = s.Addr()
		code = m.Run()
		if err := s.Close(); err != nil && code == 0 {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait")); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}
