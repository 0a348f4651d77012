package history

import "golang.org/x/sys/unix"

// Now returns the machine's monotonic clock (CLOCK_MONOTONIC) in
// nanoseconds: every process of the machine reads the same clock, so the
// events of the harness and of its client processes are on one time line.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("history: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}
