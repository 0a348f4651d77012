package k8slease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
)

// DefaultLeaseDuration is the lease duration of the zero [Config]: client-go's
// recommended 15 s.
const DefaultLeaseDuration = 15 * time.Second

// MinLeaseDuration is the shortest lease duration [Config.Lock] accepts. The
// deadline rule (see the package doc) gives up to a second of every renewal
// to the whole second the record is compared at, so a shorter lease would
// leave a renewal too little time to be confirmed.
const MinLeaseDuration = 2 * time.Second

// Config sets how a [Lease] is kept. The zero Config is client-go's
// recommended configuration, a 15 s lease; Config{LeaseDuration: 2 *
// time.Second} alone is a working configuration too: every other field has
// a default derived from LeaseDuration.
//
// Candidates for one Lease object, k8slease's and client-go's alike, should
// use the same lease duration: a candidate takes the Lease over once the
// record it observed has not changed for the record's leaseDurationSeconds,
// which its holder wrote. A holder whose record is rewritten with a shorter
// duration than its own, or none, is lost ([ErrTakenOver]).
type Config struct {
	// LeaseDuration is how long a candidate waits, from the moment it first
	// sees a version of the record, before it takes the Lease over if that
	// version has not changed. It is written into the record as
	// spec.leaseDurationSeconds, rounded up to a whole second. Zero means
	// [DefaultLeaseDuration]; less than [MinLeaseDuration] is refused.
	LeaseDuration time.Duration

	// RenewPeriod is the time between two renewals of a holder; from a
	// second up, it is rounded down to whole seconds. Zero means
	// LeaseDuration/6, at least a second: the renewal that moves the
	// deadline is the first one of each whole second (see the package doc),
	// so renewing more often than once a second costs writes and buys
	// nothing; with a 2 s lease, a renewal a second leaves a round trip of up
	// to 0.8 s to confirm it, and a 15 s lease renews every 2 s, client-go's
	// RetryPeriod. A renewal is sent just after the start of a whole second,
	// so that each one confirmed moves the deadline by the most it can.
	RenewPeriod time.Duration

	// Margin is how long before the earliest moment another candidate may
	// take the Lease over the holder's signal is lost. It covers the
	// difference between the rates of this process's clock and another
	// candidate's over one lease duration (clocks kept by NTP differ by less
	// than 0.05%, 7.5 ms over 15 s) and the delay between the deadline and
	// the moment this process runs its timer (a scheduler's or garbage
	// collector's pause: milliseconds, rarely tens). A suspended machine or
	// a paused virtual machine stops the monotonic clock the deadline is
	// kept on, and no margin covers that: the fencing token does. Zero means
	// LeaseDuration/10, 200 ms of a 2 s lease, as etcdlease's default; a
	// margin that leaves less than a quarter of the lease duration for a
	// renewal's round trip is refused.
	Margin time.Duration

	// RetryPeriod is how often a waiting candidate reads the Lease when
	// nothing wakes it sooner. A candidate also watches the Lease, so a
	// release or a change is seen at once, and it tries again at the
	// moment the record it observed expires; the period only bounds how
	// long a missed watch event can delay it. Zero means LeaseDuration/6.
	RetryPeriod time.Duration
}

// withDefaults returns c with every zero field set, or an error naming the
// field that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.LeaseDuration < MinLeaseDuration {
		return c, fmt.Errorf("lease duration %v is shorter than %v", c.LeaseDuration, MinLeaseDuration)
	}
	if c.RenewPeriod == 0 {
		c.RenewPeriod = max(time.Second, c.LeaseDuration/6)
	}
	if c.Margin == 0 {
		c.Margin = c.LeaseDuration / 10
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = c.LeaseDuration / 6
	}
	switch {
	case c.RenewPeriod < 0:
		return c, fmt.Errorf("renew period %v is negative", c.RenewPeriod)
	case c.Margin < 0:
		return c, fmt.Errorf("margin %v is negative", c.Margin)
	case c.RetryPeriod < 0:
		return c, fmt.Errorf("retry period %v is negative", c.RetryPeriod)
	case c.roundTrip() < c.LeaseDuration/4:
		return c, fmt.Errorf("lease duration %v less margin %v, a second and renew period %v leaves %v for a renewal's round trip, less than a quarter of the lease duration",
			c.LeaseDuration, c.Margin, c.RenewPeriod, c.roundTrip())
	}
	return c, nil
}

// roundTrip is the longest round trip that still confirms the next renewal
// before the deadline: renewals in whole seconds, each sent at the start of
// one, RenewPeriod rounded down to whole seconds apart (at least one).
func (c Config) roundTrip() time.Duration {
	step := max(time.Second, c.RenewPeriod.Truncate(time.Second))
	return c.LeaseDuration - c.Margin - step
}

// durationSeconds is the lease duration as the record writes it: whole
// seconds, rounded up.
func (c Config) durationSeconds() int32 {
	return int32((c.LeaseDuration + time.Second - 1) / time.Second)
}

// Lock waits until the candidate identity holds the Lease object
// namespace/name, with the default [Config], and returns its lease. See
// [Config.Lock].
func Lock(ctx context.Context, cs kubernetes.Interface, namespace, name, identity string) (*Lease, error) {
	return Config{}.Lock(ctx, cs, namespace, name, identity)
}

// checkArgs describes what is wrong with Lock's arguments, or returns nil.
func checkArgs(cs kubernetes.Interface, namespace, name, identity string) error {
	switch {
	case cs == nil:
		return errors.New("nil clientset")
	case namespace == "":
		return errors.New("empty namespace")
	case name == "":
		return errors.New("empty name")
	case identity == "":
		return errors.New("empty identity")
	}
	return nil
}
