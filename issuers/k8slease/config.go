package k8slease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/zukhruf/lease/health"
)

// DefaultLeaseDuration is the lease duration of the zero [Config]: client-go's
// recommended 15 s.
const DefaultLeaseDuration = 15 * time.Second

// MinLeaseDuration is the shortest lease duration [Config.Lock] accepts. The
// deadline rule (see the package doc) gives up to a second of every renewal
// to the whole second the record is compared at, so a shorter lease would
// leave a renewal too little time to be confirmed.
const MinLeaseDuration = 2 * time.Second

// MaxLeaseDuration is the longest lease duration [Config.Lock] accepts: a
// holder that dies without [Lease.Unlock] keeps every candidate waiting this
// long, and a lease kept for a long job is kept by its renewals, not by a
// long duration. It is far inside the int32 seconds of the record's
// spec.leaseDurationSeconds, which a longer duration would wrap.
const MaxLeaseDuration = time.Hour

// MinRenewPeriod is the shortest renewal period [Config.Lock] accepts: the
// renewal that moves the deadline is the first one of each whole second (see
// the package doc), so renewing more often costs writes and buys nothing.
const MinRenewPeriod = time.Second

// MinRetryPeriod is the shortest retry period [Config.Lock] accepts: a
// waiting candidate is woken by its watch and by the expiry of the record it
// observed, and its periodic read only catches a watch event that was lost;
// once a second bounds that delay while each waiting candidate costs the
// apiserver one read a second at most.
const MinRetryPeriod = time.Second

// MaxIdentityLength is the longest identity, in bytes, [Config.Lock]
// accepts: every renewal writes it and every cause quotes it; client-go's
// identities, a host name and a UUID, stay under 300 bytes, and an identity
// of 2 MiB is refused by the apiserver's etcd client (500), one of 4 MiB by
// the apiserver (413), only at the first write.
const MaxIdentityLength = 1024

// minMargin returns the smallest margin [Config.Lock] accepts for a lease
// duration d: 10 ms for the delay between the deadline and the moment a
// loaded process runs its timer, plus 0.1% of d, twice the 0.05% by which
// the rates of clocks kept by NTP may differ.
func minMargin(d time.Duration) time.Duration { return 10*time.Millisecond + d/1000 }

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
	// [DefaultLeaseDuration]; less than [MinLeaseDuration] or more than
	// [MaxLeaseDuration] is refused.
	LeaseDuration time.Duration

	// RenewPeriod is the time between two renewals of a holder, rounded
	// down to whole seconds; less than [MinRenewPeriod] is refused. Zero means
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
	// LeaseDuration/10, 200 ms of a 2 s lease, as etcdlease's default. A
	// margin under 10 ms plus 0.1% of the lease duration (the timer's delay
	// on a loaded machine, and twice the rate difference NTP allows) is
	// refused, as is one that leaves less than a quarter of the lease
	// duration for a renewal's round trip.
	Margin time.Duration

	// RetryPeriod is how often a waiting candidate reads the Lease when
	// nothing wakes it sooner. A candidate also watches the Lease, so a
	// release or a change is seen at once, and it tries again at the
	// moment the record it observed expires; the period only bounds how
	// long a missed watch event can delay it. Zero means LeaseDuration/6,
	// at least [MinRetryPeriod]; less than MinRetryPeriod or more than the
	// lease duration is refused. A read that fails is retried after a
	// pause that doubles from 100 ms up to 2 s: a namespace that does not
	// exist yet costs the apiserver at most a read and a create each 2 s.
	RetryPeriod time.Duration

	// Observer, if not nil, is told of each lease's grant, renewals,
	// failed renewals, risk, loss and release ([health.Observer]). Nil
	// reports nothing and costs nothing.
	Observer health.Observer
}

// withDefaults returns c with every zero field set, or an error naming the
// field that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	switch {
	case c.LeaseDuration < MinLeaseDuration:
		return c, fmt.Errorf("lease duration %v is shorter than %v", c.LeaseDuration, MinLeaseDuration)
	case c.LeaseDuration > MaxLeaseDuration:
		return c, fmt.Errorf("lease duration %v is longer than %v", c.LeaseDuration, MaxLeaseDuration)
	}
	if c.RenewPeriod == 0 {
		c.RenewPeriod = max(MinRenewPeriod, c.LeaseDuration/6)
	}
	if c.Margin == 0 {
		c.Margin = c.LeaseDuration / 10
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = max(MinRetryPeriod, c.LeaseDuration/6)
	}
	switch {
	case c.RenewPeriod < MinRenewPeriod:
		return c, fmt.Errorf("renew period %v is shorter than %v: the deadline moves once a whole second", c.RenewPeriod, MinRenewPeriod)
	case c.Margin < minMargin(c.LeaseDuration):
		return c, fmt.Errorf("margin %v is shorter than %v, 10 ms plus 0.1%% of the lease duration %v", c.Margin, minMargin(c.LeaseDuration), c.LeaseDuration)
	case c.RetryPeriod < MinRetryPeriod:
		return c, fmt.Errorf("retry period %v is shorter than %v", c.RetryPeriod, MinRetryPeriod)
	case c.RetryPeriod > c.LeaseDuration:
		return c, fmt.Errorf("retry period %v is longer than the lease duration %v", c.RetryPeriod, c.LeaseDuration)
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
// It asks the apiserver nothing: each of these would be refused by it, or
// would break the lease, only at the first write.
func checkArgs(cs kubernetes.Interface, namespace, name, identity string) error {
	if isNil(cs) || isNil(cs.CoordinationV1()) {
		// A typed nil *kubernetes.Clientset, or a zero Clientset, whose
		// coordination client is nil, would panic at the first request.
		return errors.New("nil clientset")
	}
	if msgs := apivalidation.ValidateNamespaceName(namespace, false); len(msgs) > 0 {
		return fmt.Errorf("namespace %s is not a valid namespace name (a DNS label): %s", quote(namespace), strings.Join(msgs, "; "))
	}
	if msgs := apivalidation.NameIsDNSSubdomain(name, false); len(msgs) > 0 {
		return fmt.Errorf("name %s is not a valid Lease name (a DNS subdomain): %s", quote(name), strings.Join(msgs, "; "))
	}
	switch {
	case identity == "":
		return errors.New("empty identity")
	case len(identity) > MaxIdentityLength:
		return fmt.Errorf("identity %s is %d bytes long, longer than %d", quote(identity), len(identity), MaxIdentityLength)
	case !utf8.ValidString(identity):
		// Sent or read as JSON, each invalid byte becomes U+FFFD: the
		// record would name another holder than this one.
		return fmt.Errorf("identity %s is not valid UTF-8", quote(identity))
	}
	return nil
}

// isNil reports whether v is nil, or a nil pointer, map, slice, func, or
// channel inside an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}

// quoteMax is how many bytes of a caller's string an error quotes.
const quoteMax = 64

// quote returns s quoted for an error, cut to its first quoteMax bytes.
func quote(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(strings.ToValidUTF8(s[:quoteMax], "")), len(s))
}

// subject returns namespace/name for an error, each cut by quote's rule.
func subject(namespace, name string) string {
	cut := func(s string) string {
		if len(s) <= quoteMax {
			return s
		}
		return fmt.Sprintf("%s...(%d bytes)", strings.ToValidUTF8(s[:quoteMax], ""), len(s))
	}
	return cut(namespace) + "/" + cut(name)
}
