package etcdlease_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its clients and its etcd server, and every lease stops
// following its claim at the loss or the release: nothing may be left
// running, in this package or in etcd's.
//
// With pausedEnv set, the binary is the child process of a paused-holder
// trial instead (see TestFaults); with manyServerEnv set, the etcd server
// of TestHoldMany.
func TestMain(m *testing.M) {
	if spec := os.Getenv(pausedEnv); spec != "" {
		os.Exit(pausedHolder(spec))
	}
	if dir := os.Getenv(manyServerEnv); dir != "" {
		os.Exit(manyServer(dir))
	}
	goleak.VerifyTestMain(m)
}
