package etcdlease_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its clients and its etcd server, and every lease stops
// following its claim at the loss or the release: nothing may be left
// running, in this package or in etcd's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
