package lost_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/zukhruf/lease/lost"
)

// An Error logs with slog as a group of attributes, subject and cause. Log
// the Error that errors.As finds: slog logs a wrapped error by its message.
func ExampleError_LogValue() {
	// Drop the time, so that the output is the same on every run.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))

	err := fmt.Errorf("copy rows: batch 3: %w",
		lost.New("orders", errors.New("the coordinator refused the claim")))

	var le *lost.Error
	if errors.As(err, &le) {
		logger.Warn("stopped copying", "lease", le)
	}
	logger.Warn("stopped copying", "err", err)
	// Output:
	// level=WARN msg="stopped copying" lease.subject=orders lease.cause="the coordinator refused the claim"
	// level=WARN msg="stopped copying" err="copy rows: batch 3: lease lost: orders: the coordinator refused the claim"
}
