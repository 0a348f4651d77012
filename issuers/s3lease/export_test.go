package s3lease

import "time"

// WithClockAhead returns c with a wall clock that runs ahead of this
// process's by d: the clock of another host, for the clock-skew tests.
func WithClockAhead(c Config, d time.Duration) Config {
	c.now = func() time.Time { return time.Now().Add(d) }
	return c
}
