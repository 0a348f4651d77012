// Package fakeclock runs the wall clock of a server's process at a rate
// that can change while it runs: the clock of a machine whose oscillator
// runs fast or slow. It preloads Debian's libfaketime into the process and
// steers it through a timestamp file that libfaketime reads at every clock
// call; the monotonic clock stays true.
//
// libfaketime makes a process's clock S + (t−S)·rate + offset, where S is
// the moment it started in the process and t the true time. A Clock keeps
// the server's clock continuous across changes of rate: at each change it
// chooses the offset that makes the new line meet the old one now.
package fakeclock

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

//go:embed csrc/libcmalloc.c
var libcmallocSource []byte

// A Clock is the wall clock of the server processes started with its Env,
// one after another (a restart goes on from the clock the killed process
// had, since the file outlives it).
type Clock struct {
	faketime, libcmalloc, file string

	mu sync.Mutex
	// start is when libfaketime began in the process running now, by
	// Starting; rate is the clock's rate since at, when it read base.
	start, at, base time.Time
	rate            float64
}

// New prepares a clock in dir, at rate 1 and no offset: it builds the
// allocator shim (see csrc/libcmalloc.c) with cc, and finds libfaketime
// (FAKETIME_LIB, or Debian's path). A missing one is an error naming its
// Debian package.
func New(dir string) (*Clock, error) {
	faketime, err := findFaketime()
	if err != nil {
		return nil, err
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return nil, errors.New("fakeclock: cc not found, to build the allocator shim: install the Debian package gcc (make faketime-deps)")
	}
	src, lib := filepath.Join(dir, "libcmalloc.c"), filepath.Join(dir, "libcmalloc.so")
	if err := os.WriteFile(src, libcmallocSource, 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", lib, src, "-ldl").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("fakeclock: build %s: %v: %s", lib, err, out)
	}
	now := time.Now()
	c := &Clock{faketime: faketime, libcmalloc: lib, file: filepath.Join(dir, "faketime"), start: now, at: now, base: now, rate: 1}
	return c, c.write(0, 1)
}

func findFaketime() (string, error) {
	if p := os.Getenv("FAKETIME_LIB"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("fakeclock: FAKETIME_LIB: %w", err)
		}
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
	if len(found) == 0 {
		return "", errors.New("fakeclock: libfaketime.so.1 not found under /usr/lib/*/faketime: install the Debian package libfaketime (make faketime-deps), or set FAKETIME_LIB to its path")
	}
	return found[0], nil
}

// Env returns the environment a server process runs on the clock with,
// after os.Environ().
func (c *Clock) Env() []string {
	return []string{
		// The shim first: its malloc is the process's (csrc/libcmalloc.c).
		"LD_PRELOAD=" + c.libcmalloc + " " + c.faketime,
		"FAKETIME_TIMESTAMP_FILE=" + c.file,
		"FAKETIME_NO_CACHE=1",
		// Timers keep true time; expiries and timestamps take the wall
		// clock's (Redis expires keys by it).
		"DONT_FAKE_MONOTONIC=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}
}

// Starting tells the clock that a process is about to start on it: its
// libfaketime counts from about now. Processes on one clock must not run
// at once, and one must start at rate 1, where the start does not matter
// (libfaketime shows t + offset), so that it goes on from the clock of the
// one before it.
func (c *Clock) Starting() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start = time.Now()
}

// A Reading is the clock of the process on a Clock as one call read it:
// the time it showed, at a true time between the call's send and its
// answer.
type Reading struct {
	Shows, Sent, Answered time.Time
}

// A Reader reads the clock of the process running on a Clock.
type Reader func() (Reading, error)

// SetRate makes the clock run at rate from now on, going on from the time
// it shows now. It returns how far the process's clock is off the line
// the Clock set, by the last reading, and that reading's uncertainty (see
// measure).
//
// The offset that continues the clock depends on the moment libfaketime
// began in the process, which Starting only estimates (on a loaded machine
// the process reads its clock first hundreds of milliseconds later). So
// SetRate reads the process's clock once the rate is set, and when it is
// off the line by more than the reading's uncertainty, takes the gap as
// the error of that moment (when the rate changed enough to measure it:
// the gap is the moment's error times the change) or of the offset, and
// writes the file again; three times at most.
func (c *Clock) SetRate(rate float64, read Reader) (off, uncertainty time.Duration, err error) {
	if rate <= 0 {
		return 0, 0, fmt.Errorf("fakeclock: rate %v, want above 0", rate)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	shows := c.base.Add(time.Duration(float64(now.Sub(c.at)) * c.rate))
	c.at, c.base, c.rate = now, shows, rate
	offset := c.offset()
	if err := c.write(offset, rate); err != nil {
		return 0, 0, err
	}
	for try := 0; ; try++ {
		off, uncertainty, err = c.measure(read)
		if err != nil || off.Abs() <= uncertainty || try == 3 {
			return off, uncertainty, err
		}
		// libfaketime shows start' + (t−start')·rate + offset where this
		// Clock reckoned with start: off = (start'−start)·(1−rate).
		if math.Abs(1-rate) >= 0.5 {
			c.start = c.start.Add(time.Duration(float64(off) / (1 - rate)))
			offset = c.offset()
		} else {
			offset -= off.Seconds()
		}
		if err := c.write(offset, rate); err != nil {
			return 0, 0, err
		}
	}
}

// measure reads the process's clock, and returns how far it is off the
// line by the best of three readings (see Best), and that reading's
// uncertainty: the clock read at a true time within half the round trip
// of its middle, when it ran at the rate.
func (c *Clock) measure(read Reader) (off, uncertainty time.Duration, err error) {
	best, err := Best(read)
	if err != nil {
		return 0, 0, err
	}
	half := best.Answered.Sub(best.Sent) / 2
	return best.Shows.Sub(c.shows(best.Sent.Add(half))), time.Duration(float64(half) * c.rate), nil
}

// Best reads the clock three times and returns the reading with the
// shortest round trip: the one that places the time shown best.
func Best(read Reader) (Reading, error) {
	var best Reading
	for i := range 3 {
		r, err := read()
		if err != nil {
			return r, fmt.Errorf("fakeclock: read the clock: %w", err)
		}
		if i == 0 || r.Answered.Sub(r.Sent) < best.Answered.Sub(best.Sent) {
			best = r
		}
	}
	return best, nil
}

// Rate returns the rate the clock ran at from reading a to reading b, by
// the middles of their calls, and how far the true rate may be from it:
// the true times of the readings are known to within their calls, and the
// times shown to a microsecond.
func Rate(a, b Reading) (rate, uncertainty float64) {
	ran := float64(b.Shows.Sub(a.Shows))
	middle := func(r Reading) time.Time { return r.Sent.Add(r.Answered.Sub(r.Sent) / 2) }
	rate = ran / float64(middle(b).Sub(middle(a)))
	slowest := (ran - 2e3) / float64(b.Answered.Sub(a.Sent))
	fastest := (ran + 2e3) / float64(b.Sent.Sub(a.Answered))
	return rate, max(rate-slowest, fastest-rate)
}

// offset returns the offset that puts libfaketime's line, counted from
// start, on the Clock's: start + (at−start)·rate + offset = base.
func (c *Clock) offset() float64 {
	return c.base.Sub(c.start).Seconds() - c.at.Sub(c.start).Seconds()*c.rate
}

// shows returns the time the clock shows at the true time t, by the rates
// set: the figure a process on it should read.
func (c *Clock) shows(t time.Time) time.Time {
	return c.base.Add(time.Duration(float64(t.Sub(c.at)) * c.rate))
}

// write replaces the timestamp file at once: libfaketime reads it at every
// clock call, and must never read half of it.
func (c *Clock) write(offset, rate float64) error {
	tmp := c.file + ".new"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%+.6f x%.6f\n", offset, rate), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.file)
}
