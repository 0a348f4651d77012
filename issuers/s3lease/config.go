package s3lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease/health"
)

// DefaultTTL is the TTL of the zero [Config]: how long after each write of
// its holder the lock object counts as held.
const DefaultTTL = 15 * time.Second

// MinTTL and MaxTTL bound the TTL [Config.Lock] accepts. Below a second,
// an S3 round trip (tens of milliseconds on a cloud store, more under
// load) and the clock-skew margin would eat the lease; above a day, a
// holder that vanished blocks its subject longer than any deployment waits.
const (
	MinTTL = time.Second
	MaxTTL = 24 * time.Hour
)

// maxKey is the longest object key S3 takes, in bytes.
const maxKey = 1024

// Config sets how a [Lease] is kept. The zero Config is a 15 s TTL whose
// subject names its bucket ("bucket/key"); Config{Bucket: "locks", TTL: 5 *
// time.Second} is a working configuration too: every other field has a
// default derived from TTL.
//
// Holders of one subject must use the same TTL, and a ClockSkew that
// bounds the skew between all their clocks: a waiter takes the lock over
// when its own clock passes the expiry that the holder wrote.
type Config struct {
	// Bucket is the bucket that holds the lock objects; it must exist. A
	// subject is then the object's key. Empty means the subject names its
	// bucket: "bucket/key", the object key being what follows the first
	// '/'.
	Bucket string

	// TTL is how long the lock object counts as held after each write of
	// its holder (the grant and every renewal): the holder writes its
	// clock's time plus TTL into the object, and a waiter takes the object
	// over once its own clock passes that time. Zero means [DefaultTTL];
	// outside [MinTTL, MaxTTL] is refused.
	TTL time.Duration

	// ClockSkew is the largest difference allowed between the wall clocks
	// of any two holders of a subject. S3 keeps no expiry: each waiter
	// judges the holder's written expiry by its own clock, so a waiter
	// whose clock runs ahead of the holder's by δ takes over δ early; the
	// holder's deadline comes ClockSkew (and the Margin) before its
	// written expiry, so that it is lost before any waiter within the skew
	// may take over (the README's "The deadline"). Clocks kept by NTP
	// agree within tens of milliseconds; zero means TTL/10, 1.5 s of the
	// default TTL, which also covers a host that lost its time server for
	// hours. Negative is refused, and so is a ClockSkew that with the
	// Margin reaches half the TTL.
	ClockSkew time.Duration

	// Margin covers what is not clock skew: the difference between the
	// rates of the clocks over one TTL and the delay between the deadline
	// and the moment this process runs its timer (a scheduler's or garbage
	// collector's pause). Zero means TTL/20.
	Margin time.Duration

	// RenewPeriod is the time between two renewals of a lease, and so the
	// bound on how late a holder learns that an operator overwrote or
	// deleted its lock object (plus the renewal's round trip). Zero means
	// TTL/4: three renewals fit before the deadline of the defaults, so
	// one lost or slow costs nothing. More than half of TTL less ClockSkew
	// less Margin is refused.
	RenewPeriod time.Duration

	// RetryPeriod is the longest a waiting Lock sleeps between two reads
	// of a held lock object: S3 pushes nothing, so a waiter polls, from a
	// sixteenth of RetryPeriod doubling up to it, and at once when the
	// holder's written expiry passes or a lease of the same client is
	// released. Zero means TTL/4.
	RetryPeriod time.Duration

	// Observer, if not nil, is told of each lease's grant, renewals,
	// failed renewals, risk, loss and release ([health.Observer]), after
	// the fact, on the goroutines of Lock, Unlock, the session's renewers
	// and the lease's deadline. Nil reports nothing and costs nothing.
	Observer health.Observer

	// Holder names this process in the lock objects it writes, for
	// operators who read them. Empty means the host name and process id.
	Holder string

	// now is the wall clock; nil means time.Now. Tests set it to a clock
	// that runs ahead.
	now func() time.Time
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
	if c.ClockSkew == 0 {
		c.ClockSkew = c.TTL / 10
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 20
	}
	if c.RenewPeriod == 0 {
		c.RenewPeriod = c.TTL / 4
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = c.TTL / 4
	}
	if c.Holder == "" {
		host, _ := os.Hostname()
		c.Holder = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if c.now == nil {
		c.now = time.Now
	}
	switch {
	case c.ClockSkew < 0:
		return c, fmt.Errorf("clock skew %v is negative", c.ClockSkew)
	case c.Margin < 0:
		return c, fmt.Errorf("margin %v is negative", c.Margin)
	case c.ClockSkew+c.Margin >= c.TTL/2:
		return c, fmt.Errorf("clock skew %v plus margin %v is half the TTL %v or more", c.ClockSkew, c.Margin, c.TTL)
	case c.RenewPeriod < 0:
		return c, fmt.Errorf("renew period %v is negative", c.RenewPeriod)
	case c.RenewPeriod > c.life()/2:
		return c, fmt.Errorf("renew period %v is more than half of TTL %v less clock skew %v less margin %v", c.RenewPeriod, c.TTL, c.ClockSkew, c.Margin)
	case c.RetryPeriod < 0:
		return c, fmt.Errorf("retry period %v is negative", c.RetryPeriod)
	}
	return c, nil
}

// life is how long after the send time of its last confirmed write a lease
// lasts: the deadline rule (deadline.go).
func (c Config) life() time.Duration { return c.TTL - c.ClockSkew - c.Margin }

// object returns the bucket and key of subject's lock object.
func (c Config) object(subject string) (bucket, key string, err error) {
	bucket, key = c.Bucket, subject
	if bucket == "" {
		var ok bool
		bucket, key, ok = strings.Cut(subject, "/")
		if !ok || bucket == "" {
			return "", "", fmt.Errorf("subject %q names no bucket (Config.Bucket is empty, so a subject is \"bucket/key\")", subject)
		}
	}
	switch {
	case key == "":
		return "", "", fmt.Errorf("subject %q names no object key", subject)
	case len(key) > maxKey:
		return "", "", fmt.Errorf("object key of %d bytes is longer than S3's %d", len(key), maxKey)
	}
	return bucket, key, nil
}

// Lock waits until this caller holds subject, with the default [Config],
// and returns its lease; subject is "bucket/key". See [Config.Lock].
func Lock(ctx context.Context, client *minio.Client, subject string) (*Lease, error) {
	return Config{}.Lock(ctx, client, subject)
}

// newID returns a random id that tells this lease's writes from every
// other's.
func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
