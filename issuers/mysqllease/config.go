package mysqllease

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/zukhruf/lease/health"
)

// The defaults of [Config]. DefaultHeartbeat and DefaultMargin are the
// defaults at DefaultServerTimeout: a zero Margin is half of ServerTimeout,
// and a zero Heartbeat a fifth of the deadline, ServerTimeout − Margin (see
// [Config.Margin] and [Config.Heartbeat]).
const (
	DefaultServerTimeout = 10 * time.Second
	DefaultHeartbeat     = time.Second
	DefaultMargin        = 5 * time.Second

	// DefaultSessions is the default of [Config.Sessions].
	DefaultSessions = 4

	// DefaultWaiters is the default of [Config.Waiters].
	DefaultWaiters = 4
)

// The bounds of [Config]'s durations, which Lock checks: a value out of
// range is refused, never rounded to one that means something else.
const (
	// MinHeartbeat is the shortest Heartbeat: each heartbeat is a statement
	// the server runs.
	MinHeartbeat = 10 * time.Millisecond

	// MaxServerTimeout is the longest ServerTimeout, 31,536,000 s (365
	// days), the ceiling of wait_timeout.
	MaxServerTimeout = 31536000 * time.Second
)

// MaxNameLen is the longest lock name, in characters, that Lock sends to
// the server as it is: MySQL refuses a longer one (ER_USER_LOCK_WRONG_NAME).
// A longer subject is hashed (see [Config.LockName]), never cut.
const MaxNameLen = 64

// Config sets how a lease confirms its session. The zero Config uses the
// defaults; [Lock] is Config{}.Lock.
//
// The deadline rule: Lock sets the session's wait_timeout (and the other
// timeouts that end a session) to ServerTimeout, so the server keeps a
// silent session, and its lock, for at least ServerTimeout after it last
// heard from it, which it did after the lease sent its last confirmed
// heartbeat. The lease is lost once no heartbeat sent in the last
// ServerTimeout − Margin has been confirmed: before the server may free the
// lock, by Margin, as long as the two machines' clocks run at the same rate
// (they measure intervals, not instants). Go's monotonic clock stops while
// the client's host is suspended: a lease of a suspended host outlives the
// server's timeout by the time the host slept.
//
// The durations must keep MinHeartbeat ≤ Heartbeat < (ServerTimeout −
// Margin)/2, 0 < Margin < ServerTimeout ≤ MaxServerTimeout, and ServerTimeout a
// whole number of seconds (wait_timeout counts seconds); Lock refuses any
// other Config with an error that names the field and its bound.
type Config struct {
	// ServerTimeout is the session's wait_timeout: how long the server
	// keeps a silent session, and its lock (DefaultServerTimeout if zero).
	// Lock also sets interactive_timeout, net_read_timeout and
	// net_write_timeout to it, so that no timeout of the server ends the
	// session sooner.
	ServerTimeout time.Duration

	// Heartbeat is how often a shared session confirms itself, and every
	// lease on it, with a statement (if zero, a fifth of the deadline,
	// ServerTimeout − Margin: DefaultHeartbeat at the default timeout). A
	// heartbeat sent at s is confirmed at s + rtt, and the next one, sent
	// a Heartbeat after that, is confirmed at s + 2 rtt + Heartbeat, which
	// must come within the deadline of s; Heartbeat must be shorter than
	// half the deadline, so that some round trip fits: the fifth lets a
	// round trip take two fifths of the deadline (2 s at the defaults), at
	// five statements a deadline per session. It also bounds how long a
	// step of a Lock's wait on a session of waits (GET_LOCK(name, step))
	// runs, with a quarter of the deadline. The default fits any deadline
	// over 20 ms (two heartbeats at MinHeartbeat); a Margin that leaves a
	// shorter one is refused, naming Margin.
	Heartbeat time.Duration

	// Margin is how long before the server may free a silent session's
	// locks the leases on it are lost; ServerTimeout − Margin is the
	// leases' deadline. It must be shorter than ServerTimeout. If zero, it
	// is half of ServerTimeout (DefaultMargin at the default timeout): it
	// covers the two machines' clocks running at different rates, and the
	// time the lost session's close takes to reach the server, and it
	// grows with ServerTimeout, as a drift does, so that any ServerTimeout
	// from 1 s up has a default that Lock takes (Config{ServerTimeout: 3 *
	// time.Second} is lost 1.5 s after the last confirmed heartbeat's send,
	// with a heartbeat every 300 ms).
	Margin time.Duration

	// Sessions bounds the shared sessions that the leases of one *sql.DB
	// (with this Config's timing) open for Locks of free subjects
	// (DefaultSessions, 4, if zero). Each session holds up to 1,000 leases
	// before a Lock opens the next, and the least loaded takes each new
	// lease: 10,000 leases take the 4 sessions, 2,500 each. Each takes two
	// connections out of the pool (the session and its watcher) for as long
	// as it has leases, and no more than (MaxOpenConns − 1)/2 when the pool
	// has a bound, so that the caller keeps one. A session's end loses every
	// lease on it and no other: the bound trades that share against the
	// server's connections. A Lock that had to wait (the lock held
	// elsewhere) is granted on a session of waits, or on a shared session
	// when it polled (see [Config.Waiters]). Sessions must not be negative.
	Sessions int

	// Waiters bounds the sessions of waits of one *sql.DB (with this
	// Config's timing): the sessions on which Locks wait for a lock held
	// elsewhere (DefaultWaiters, 4, if zero). A session of waits is opened
	// as a shared one is, with its watcher and heartbeat; it waits for one
	// lock at a time in GET_LOCK(name, step), so that the server grants it
	// the lock at the holder's release, in a round trip; it then holds that
	// lease alone, and serves the next wait once it is released, or closes
	// 100 ms later. A Lock that must wait while every session of waits is
	// busy, and Waiters are open, polls instead: each lock that such Locks
	// wait for is tried with GET_LOCK(name, 0), all of them in one
	// statement on a shared session (250 locks a statement), 10 ms after a
	// grant, doubling to 50 ms while nothing is granted, each interval
	// jittered down by up to a half; a release is seen about 20 ms later,
	// and the server's connections do not grow with the waits. The default
	// keeps the issuer's connections from one pool at most 2 × (Sessions +
	// Waiters) = 16, under the 20 that a server of max_connections 50 can
	// spare and a ninth of MySQL's default 151, and lets four waits at once
	// hand over in a round trip. The pool's MaxOpenConns bounds the
	// sessions too, as for Sessions. Waiters must not be negative.
	Waiters int

	// Grace is how long a waiting Lock that the server granted a lock
	// whose holder's session has ended since (killed, crashed, closed
	// without a release) waits before it returns, so that the holder,
	// whose lease of this package is lost when its watcher is granted the
	// session's watch lock, a few milliseconds after the server freed its
	// locks, knows before the new holder acts. A release by RELEASE_LOCK
	// (an Unlock), the holder's session still alive, hands over at once.
	// If zero, it is 2 × Heartbeat: the holder learns within milliseconds
	// by its watcher, and, while its watcher is being started again,
	// within a Heartbeat and a round trip by its heartbeat, when its
	// Config has the same Heartbeat. It must not be negative nor longer
	// than the deadline, ServerTimeout − Margin, by which any holder with
	// this Config's deadline is lost.
	Grace time.Duration

	// Alone, if set, gives each lease a session of its own, opened by its
	// Lock and closed by its Unlock or its loss: no other lease shares its
	// fate, at the cost of a dial and the session's checks for each Lock
	// and two server connections for each lease.
	Alone bool

	// Fence, if not empty, names a table (name VARCHAR(255) PRIMARY KEY,
	// token BIGINT NOT NULL) in which Lock takes the lease's fencing token,
	// in the lease's session once the lock is granted: see [Lease.Token].
	// It is "table" (in the connection's default database) or
	// "database.table", each part 1 to 64 characters without a backtick.
	Fence string

	// Secret, if not empty, keys the derivation of the lock's name from
	// the subject: see [Config.LockName]. Every process that takes the same
	// locks must use the same secret.
	Secret []byte

	// Observer, if not nil, is told of each lease's grant, its session's
	// confirmed statements (its renewals: a heartbeat, or any statement
	// answered as sent), a heartbeat the server answered with an error
	// (RenewalFailed), the session's warning (AtRisk, a third of the span
	// ServerTimeout − Margin before the deadline when no later statement
	// was confirmed), its loss and its release ([health.Observer]). Nil
	// reports nothing and costs nothing: a session on which no lease has
	// an observer builds no event and arms no warning.
	Observer health.Observer
}

// withDefaults returns c with the defaults for its zero fields, or an error
// naming the field that is out of range.
func (c Config) withDefaults() (Config, error) {
	if c.ServerTimeout == 0 {
		c.ServerTimeout = DefaultServerTimeout
	}
	if c.Margin == 0 {
		c.Margin = c.ServerTimeout / 2
	}
	beatSet := c.Heartbeat != 0
	if !beatSet {
		c.Heartbeat = max(MinHeartbeat, (c.ServerTimeout-c.Margin)/5)
	}
	if c.Sessions == 0 {
		c.Sessions = DefaultSessions
	}
	if c.Waiters == 0 {
		c.Waiters = DefaultWaiters
	}
	if c.Grace == 0 {
		c.Grace = 2 * c.Heartbeat
	}
	switch {
	case c.Sessions < 0:
		return c, fmt.Errorf("Config.Sessions %d is negative", c.Sessions)
	case c.Waiters < 0:
		return c, fmt.Errorf("Config.Waiters %d is negative", c.Waiters)
	case c.Grace < 0:
		return c, fmt.Errorf("Config.Grace %v is negative", c.Grace)
	case c.ServerTimeout < time.Second:
		return c, fmt.Errorf("Config.ServerTimeout %v is under 1s: wait_timeout counts whole seconds, and its floor is 1", c.ServerTimeout)
	case c.ServerTimeout > MaxServerTimeout:
		return c, fmt.Errorf("Config.ServerTimeout %v is over its ceiling %v, wait_timeout's", c.ServerTimeout, MaxServerTimeout)
	case c.ServerTimeout%time.Second != 0:
		return c, fmt.Errorf("Config.ServerTimeout %v is not a whole number of seconds: wait_timeout counts whole seconds", c.ServerTimeout)
	case c.Margin < 0:
		return c, fmt.Errorf("Config.Margin %v is negative: the lease would be lost after the server may free the lock", c.Margin)
	case c.Margin >= c.ServerTimeout:
		return c, fmt.Errorf("Config.Margin %v is not shorter than Config.ServerTimeout %v: the lease would have no time at all", c.Margin, c.ServerTimeout)
	case !beatSet && 2*c.Heartbeat >= c.deadline():
		// The default fits every deadline over twice the floor; a
		// shorter one is the Margin's mistake, not the Heartbeat's.
		return c, fmt.Errorf("Config.Margin %v leaves a deadline, Config.ServerTimeout − Config.Margin = %v, that is not longer than two heartbeats at their floor %v: no heartbeat fits", c.Margin, c.deadline(), MinHeartbeat)
	case c.Heartbeat < MinHeartbeat:
		return c, fmt.Errorf("Config.Heartbeat %v is under its floor %v: each heartbeat is a statement the server runs", c.Heartbeat, MinHeartbeat)
	case 2*c.Heartbeat >= c.ServerTimeout-c.Margin:
		return c, fmt.Errorf("Config.Heartbeat %v is not shorter than half the deadline, (Config.ServerTimeout − Config.Margin)/2 = %v: a heartbeat is confirmed a Heartbeat and a round trip after it is sent, and the next one's confirmation must come within the deadline of the last one's send", c.Heartbeat, (c.ServerTimeout-c.Margin)/2)
	case c.Grace > c.deadline():
		return c, fmt.Errorf("Config.Grace %v is longer than the deadline, Config.ServerTimeout − Config.Margin = %v, by which a holder with this Config is lost anyway", c.Grace, c.deadline())
	}
	if c.Fence != "" {
		if _, err := fenceTable(c.Fence); err != nil {
			return c, fmt.Errorf("Config.Fence: %w", err)
		}
	}
	return c, nil
}

// deadline is how long after its send time a confirmed heartbeat keeps
// the lease live.
func (c Config) deadline() time.Duration { return c.ServerTimeout - c.Margin }

// seconds returns d in seconds, as SQL: "1.5".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// fenceTable returns the quoted name of the fencing table, or an error if
// the name is not one MySQL would take as written.
func fenceTable(name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%s has %d parts, want 1 or 2 (table or database.table)", quote(name), len(parts))
	}
	for i, p := range parts {
		switch {
		case p == "":
			return "", fmt.Errorf("%s has an empty part", quote(name))
		case utf8.RuneCountInString(p) > 64:
			return "", fmt.Errorf("the part %s is over MySQL's 64 characters", quote(p))
		case !utf8.ValidString(p) || strings.ContainsAny(p, "`\x00"):
			return "", fmt.Errorf("the part %s is not valid UTF-8 without a backtick or a NUL byte", quote(p))
		}
		parts[i] = "`" + p + "`"
	}
	return strings.Join(parts, "."), nil
}

// LockName returns the name of the server's lock for subject:
// Config{}.LockName(subject).
func LockName(subject string) (string, error) { return Config{}.LockName(subject) }

// LockName returns the name of the server's lock for subject. Without a
// Secret, it is subject itself when subject has 1 to [MaxNameLen]
// characters; a longer subject becomes "mysqllease:" and the hex of the
// first 26 bytes of its SHA-256 (63 characters), never subject cut short,
// which would give two subjects one lock. With a Secret, every subject
// becomes "mysqllease:" and the hex of 26 bytes of its HMAC-SHA-256 under
// the secret: a user who picks subjects cannot name another lock of the
// server. LockName refuses an empty subject and one that is not valid
// UTF-8 or holds a NUL byte, which the server would not name as given.
//
// GET_LOCK's names are case-sensitive on MariaDB and case-insensitive on
// MySQL: on MySQL, subjects that differ only in case share a lock (a Secret
// keeps them apart).
func (c Config) LockName(subject string) (string, error) {
	switch {
	case subject == "":
		return "", errors.New("an empty subject, which GET_LOCK refuses")
	case !utf8.ValidString(subject) || strings.ContainsRune(subject, 0):
		return "", fmt.Errorf("the subject %s is not valid UTF-8 without a NUL byte", quote(subject))
	}
	if c.Secret == nil && utf8.RuneCountInString(subject) <= MaxNameLen {
		return subject, nil
	}
	var sum []byte
	if c.Secret != nil {
		m := hmac.New(sha256.New, c.Secret)
		m.Write([]byte(subject))
		sum = m.Sum(nil)
	} else {
		s := sha256.Sum256([]byte(subject))
		sum = s[:]
	}
	return hashPrefix + hex.EncodeToString(sum[:26]), nil
}

const hashPrefix = "mysqllease:"

// maxQuoted is how many bytes of a caller's string an error quotes.
const maxQuoted = 64

// quote returns s quoted for an error, cut to its first maxQuoted bytes
// (at a character's start) and marked with "…" when longer: an error
// names a subject, it does not carry it.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	n := maxQuoted
	for n > maxQuoted-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "…"
}

// literal returns s as a SQL string literal that no sql_mode reads
// otherwise: a hex literal converted to utf8mb4.
func literal(s string) string {
	return "CONVERT(X'" + hex.EncodeToString([]byte(s)) + "' USING utf8mb4)"
}
