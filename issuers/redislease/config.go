package redislease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/health"
)

// DefaultTTL is the TTL of the zero [Config]: the key's expiry after each
// write of its holder.
const DefaultTTL = 10 * time.Second

// MinTTL and MaxTTL bound the TTL [Config.Lock] accepts. Below half a
// second, a renewal's round trip and its replicas' acknowledgement would
// eat the lease; above a day, a holder that vanished blocks its key for
// longer than any deployment waits.
const (
	MinTTL = 500 * time.Millisecond
	MaxTTL = 24 * time.Hour
)

// Config sets how a [Lease] is kept. The zero Config is a 10 s TTL;
// Config{TTL: 2 * time.Second} alone is a working configuration too: every
// other field has a default derived from TTL.
//
// Holders of one key should use the same TTL: a waiting Lock takes the key
// when Redis expires it, whatever TTL its holder wrote.
type Config struct {
	// TTL is the expiry the lease sets on its key with each write (the
	// grant and every renewal), counted by Redis from the moment it runs
	// the write. Zero means [DefaultTTL]; outside [MinTTL, MaxTTL] is
	// refused.
	TTL time.Duration

	// Margin is how long before the earliest moment the key can expire the
	// holder's signal is lost. It covers the difference between the rates
	// of this process's clock and the server's over one TTL (clocks kept by
	// NTP differ by less than 0.05%, 1 ms over 2 s), the difference between
	// the wall clocks of the primary and the replica promoted in its place
	// (Redis 7 sends the expiry to replicas as an absolute time), and the
	// delay between the deadline and the moment this process runs its timer
	// (a scheduler's or garbage collector's pause: milliseconds, rarely
	// tens). A suspended machine or a paused virtual machine stops the
	// monotonic clock the deadline is kept on, and no margin covers that:
	// the fencing token does. Zero means TTL/10, 200 ms of a 2 s TTL, as
	// etcdlease's and k8slease's; a margin of half the TTL or more is
	// refused.
	Margin time.Duration

	// RenewPeriod is the time between two renewals. Zero means TTL/3: two
	// renewals fit before the deadline, so one lost in the network or one
	// slow acknowledgement of the replicas costs nothing, and a renewal
	// whose round trip takes up to a third of the TTL is still confirmed in
	// time. More than half of TTL less Margin is refused: a single slow
	// renewal would then lose the lease.
	RenewPeriod time.Duration

	// RetryPeriod bounds how long a waiting Lock sleeps when nothing wakes
	// it sooner. A waiting Lock tracks the key (CLIENT TRACKING), so a
	// release or a deletion wakes it at once, and it tries again at the
	// moment the holder's key expires; the period only bounds the wait
	// after a missed push. Zero means TTL/4.
	RetryPeriod time.Duration

	// Replicas is how many replicas must acknowledge a write (WAIT) before
	// it counts: the grant is not given, and a renewal does not move the
	// deadline, until as many replicas have it, so that the replica
	// Sentinel or Cluster promotes holds the key with its expiry. Zero
	// means every replica the primary lists as connected (ROLE) when the
	// key is granted; a renewal then needs as many acknowledgements as the
	// grant had. A primary without replicas waits for none, except behind
	// Sentinel: there Replicas is a floor under the count ROLE lists, a
	// grant needs one replica at least, and it waits until one of the
	// primary's replicas has followed it for the TTL, so that a primary
	// Sentinel replaced while it was paused, back and still writable,
	// cannot confirm a grant that the new primary gives too (the README's
	// "The deadline"). Negative is refused.
	Replicas int

	// Observer, if not nil, is told of each lease's grant, renewals,
	// failed renewals, risk, loss and release ([health.Observer]). Nil
	// reports nothing and costs nothing.
	Observer health.Observer
}

// withDefaults returns c with every zero field set, or an error naming the
// field that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < MinTTL || c.TTL > MaxTTL {
		return c, fmt.Errorf("TTL %v is outside [%v, %v]", c.TTL, MinTTL, MaxTTL)
	}
	if c.TTL%time.Millisecond != 0 {
		return c, fmt.Errorf("TTL %v is not a whole number of milliseconds, as Redis counts it", c.TTL)
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
	case c.Replicas < 0:
		return c, fmt.Errorf("replicas %d is negative", c.Replicas)
	}
	return c, nil
}

// Lock waits until this caller holds key, with the default [Config], and
// returns its lease. See [Config.Lock].
func Lock(ctx context.Context, rdb redis.UniversalClient, key string) (*Lease, error) {
	return Config{}.Lock(ctx, rdb, key)
}

// tokenSuffix names the counter of a key's fencing tokens; claimSuffix
// names the key that keeps its holder's claim (see grantScript).
const (
	tokenSuffix = ":redislease-token"
	claimSuffix = ":redislease-claim"
)

// tokenKey returns the key of key's token counter, in key's hash slot: key
// and the counter must be written by one script, which a Cluster allows
// only for keys of one slot.
func tokenKey(key string) (string, error) { return slotKey(key, tokenSuffix) }

// claimKey returns the key of key's claim, in key's hash slot.
func claimKey(key string) (string, error) { return slotKey(key, claimSuffix) }

// slotKey returns key with suffix, in key's hash slot.
func slotKey(key, suffix string) (string, error) {
	if key == "" {
		return "", errors.New("empty key")
	}
	if hasHashTag(key) {
		// The same first {…}, so the same slot.
		return key + suffix, nil
	}
	if strings.Contains(key, "}") {
		return "", fmt.Errorf("key %q has a '}' but no hash tag ({…} around its part that picks the Cluster slot): give it one, so that its token counter can share its slot", key)
	}
	// The whole key picks its slot, and so does the tag {key}.
	return "{" + key + "}" + suffix, nil
}

// hasHashTag reports whether Redis Cluster hashes only a part of key: a
// '{' followed, later, by a '}' with something in between.
func hasHashTag(key string) bool {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(key[i+1:], '}')
	return j > 0
}
