package lost_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Some tests of this package cut HTTP calls and start goroutines; none may
// outlive them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
