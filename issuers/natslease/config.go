package natslease

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease/health"
)

// DefaultBucket is the KV bucket of the zero [Config].
const DefaultBucket = "leases"

// DefaultTTL is the TTL of the zero [Config]: the per-key TTL the lease
// writes with each grant and renewal.
const DefaultTTL = 10 * time.Second

// MinTTL and MaxTTL bound the TTL [Config.Lock] accepts. The server counts
// a message's TTL in whole seconds (it drops the fraction of "2.5s"), so a
// TTL is a whole number of seconds, and at least one, the least it takes;
// above a day, a holder that vanished blocks its key for longer than any
// deployment waits.
const (
	MinTTL = time.Second
	MaxTTL = 24 * time.Hour
)

// Config sets how a [Lease] is kept. The zero Config is a 10 s TTL in the
// bucket "leases"; Config{TTL: 2 * time.Second} alone is a working
// configuration too: every other field has a default derived from TTL.
//
// Holders of one key should use the same TTL: a waiting Lock takes the key
// when the server expires it, whatever TTL its holder wrote.
type Config struct {
	// Bucket is the KV bucket the leases' keys live in. It must exist, with
	// per-key TTLs (LimitMarkerTTL, see [BucketConfig]), and keep no key
	// for less than TTL (its own TTL, the stream's MaxAge, zero or longer):
	// Lock refuses a bucket that would expire keys on its own. Empty means
	// [DefaultBucket].
	Bucket string

	// TTL is the per-key TTL (the Nats-TTL header) of each write of the
	// lease, counted by the server from the moment it stores the write.
	// Zero means [DefaultTTL]; a TTL outside [MinTTL, MaxTTL] or not a
	// whole number of seconds is refused.
	TTL time.Duration

	// Margin is how long before the earliest moment the key can expire the
	// holder's signal is lost. It covers the difference between the rates
	// of this process's clock and the servers' over one TTL (clocks kept
	// by NTP differ by less than 0.05%, 1 ms over 2 s), the difference
	// between the wall clocks of the servers of a cluster (the stream
	// leader stamps a write with its wall clock, and the replica that leads
	// next expires it by its own), and the delay between the deadline and
	// the moment this process runs its timer (a scheduler's or garbage
	// collector's pause). A suspended machine stops the monotonic clock the
	// deadline is kept on, and no margin covers that: the fencing token
	// does. Zero means TTL/10, 200 ms of a 2 s TTL, as the other issuers';
	// a margin of half the TTL or more is refused.
	Margin time.Duration

	// RenewPeriod is the time between two renewals. Zero means TTL/3: two
	// renewals fit before the deadline, so one lost or slow costs nothing.
	// More than half of TTL less Margin is refused.
	RenewPeriod time.Duration

	// RetryPeriod bounds how long a waiting Lock sleeps when nothing wakes
	// it sooner. The session's watcher wakes it at once when the key is
	// deleted, purged or expires (the server's marker); the period only
	// bounds the wait after a missed event. Zero means TTL/4.
	RetryPeriod time.Duration

	// Observer, if not nil, is told of each lease's grant, renewals,
	// failed renewals, risk, and its loss or release, after the fact (see
	// package health). Nil, the default, costs nothing. Observe must not
	// block: it runs on the lease's own paths (the watcher, the renewal
	// workers, the deadline's timer).
	Observer health.Observer
}

// withDefaults returns c with every zero field set, or an error naming the
// field that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < MinTTL || c.TTL > MaxTTL {
		return c, fmt.Errorf("TTL %v is outside [%v, %v]", c.TTL, MinTTL, MaxTTL)
	}
	if c.TTL%time.Second != 0 {
		return c, fmt.Errorf("TTL %v is not a whole number of seconds, as the server counts a message's TTL", c.TTL)
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 10
	}
	if c.RenewPeriod == 0 {
		c.RenewPeriod = c.TTL / 3
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = c.TTL / 4
	}
	switch {
	case c.Margin < 0:
		return c, fmt.Errorf("margin %v is negative", c.Margin)
	case c.Margin >= c.TTL/2:
		return c, fmt.Errorf("margin %v is half the TTL %v or more", c.Margin, c.TTL)
	case c.RenewPeriod < 0:
		return c, fmt.Errorf("renew period %v is negative", c.RenewPeriod)
	case c.RenewPeriod > (c.TTL-c.Margin)/2:
		return c, fmt.Errorf("renew period %v is more than half of TTL %v less margin %v", c.RenewPeriod, c.TTL, c.Margin)
	case c.RetryPeriod < 0:
		return c, fmt.Errorf("retry period %v is negative", c.RetryPeriod)
	}
	return c, nil
}

// BucketConfig returns the configuration of a KV bucket named name that
// leases can live in, with replicas copies of each key: per-key TTLs, and
// markers of expired keys kept for a second, long enough for every watcher
// to read them. Create it with [jetstream.JetStream.CreateKeyValue].
func BucketConfig(name string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: name, Replicas: replicas, LimitMarkerTTL: time.Second}
}

// Lock waits until this caller holds key in the bucket of the default
// [Config], and returns its lease. See [Config.Lock].
func Lock(ctx context.Context, nc *nats.Conn, key string) (*Lease, error) {
	return Config{}.Lock(ctx, nc, key)
}
