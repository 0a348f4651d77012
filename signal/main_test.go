package signal_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start goroutines (AfterLoss callbacks, waiters on Done, the
// goroutines of context.AfterFunc); none may outlive them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
