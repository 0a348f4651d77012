package kubetest

import "go.uber.org/goleak"

// IgnoreGoroutines returns the options of goleak.Find and
// goleak.VerifyTestMain that ignore goroutines which outlive a test through
// no fault of its own.
func IgnoreGoroutines() []goleak.Option {
	return nil
}
