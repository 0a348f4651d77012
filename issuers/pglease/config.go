package pglease

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/zukhruf/lease/health"
)

// The defaults of [Config]: those of a Config with every duration zero.
// A Config that sets one duration derives the zero others from it, as
// [Config] says.
const (
	DefaultHeartbeat     = time.Second
	DefaultDeadline      = 5 * time.Second
	DefaultServerTimeout = 10 * time.Second

	// DefaultSessions is how many shared sessions the leases of one pool
	// and Config use at most, when Config.Sessions is zero: see
	// [Config.Sessions].
	DefaultSessions = 4
)

// The ratios by which the zero durations of a [Config] derive from the one
// it sets: Deadline = heartbeatsPerDeadline × Heartbeat, and ServerTimeout =
// timeoutPerDeadline × Deadline.
//
// Five heartbeats per deadline: a lease is lost for nothing only when four
// heartbeats in a row, or the round trips of a loaded machine, miss the
// deadline, and a session sends no more than it needs (one statement a
// Heartbeat, whatever its number of leases). Twice the deadline for the
// server: the server frees a silent session's locks a whole Deadline after
// its holders were told, a margin for the clocks' rates, the scheduler and
// the kernel's buffers, as k8slease keeps a tenth of its lease duration.
// Deriving each from the others keeps the ratios of the defaults when a
// user scales one: Config{ServerTimeout: 3 * time.Second} gives a deadline
// of 1.5 s and a heartbeat of 300 ms, where fixed defaults would refuse it.
// A deadline derived from a ServerTimeout is at most DefaultDeadline: a
// longer one only makes a silent session's holders learn later, and the
// server's keepalives may drop a silent session sooner than a long
// ServerTimeout (Linux's default keepalive time is 2 hours).
const (
	heartbeatsPerDeadline = 5
	timeoutPerDeadline    = 2
)

// unannouncedGrace is how long a Lock that found the lock held, and was
// then granted it on a try after a release that no Unlock announced (see
// notifySQL), waits before it returns; an announcement heard meanwhile ends
// the wait at once, so that a hand-over from a lease's Unlock keeps its
// milliseconds.
//
// A release that nobody announced is a holder's session ended by the server
// (pg_terminate_backend, a crashed backend, a shutdown, a pooler's reset), a
// lock taken and released by hand, or a lease's Unlock whose announcement
// is still on its way. The server frees an ended session's locks as it
// sends the end to the holder's process, which loses the leases once it
// reads it: a network delay, and its own scheduling, later. That delay has
// no bound a client can state (with 250 leases on the session, 34 ms at
// most in 30 trials on a loaded 2-core machine, 167 ms under the race
// detector), but the holder's own deadline bounds it: a lease is lost
// Deadline after the send of its session's last confirmed statement at
// the latest, and that statement was sent before the session ended, so
// before the waiter was granted. Waiting Deadline therefore returns after
// the holder's loss, as long as the processes that take a lock share its
// Config's durations (as they share its key) and their clocks run at the
// same rate, the deadline rule's own assumption. A Heartbeat, tried first,
// was shorter than the race detector's delay. The cost falls on a takeover
// after a crash, a terminate or a release by hand, which waits a Deadline
// more; not on a hand-over from a lease's Unlock, nor on a Lock of the
// process that held the lock, which knew of its loss first.
func (c Config) unannouncedGrace() time.Duration { return c.Deadline }

// leasesPerSession is how many leases a shared session takes before the
// leases of its pool open another, up to Config.Sessions: a pool of few
// leases keeps one session, and one of many spreads them, so that a
// session's end loses a bounded share.
var leasesPerSession = 1000

// The floors and ceilings of [Config]'s durations, which Lock checks: a
// value out of range is refused, never rounded to one that means something
// else.
const (
	// MinHeartbeat is the shortest Heartbeat. Each heartbeat is a statement
	// the server runs: at this floor a lease sends 100 a second, and a
	// shorter period costs the server more than it tells the holder.
	MinHeartbeat = 10 * time.Millisecond

	// MaxServerTimeout is the longest ServerTimeout, 2³¹−1 ms (24.8 days):
	// idle_session_timeout and tcp_user_timeout are int milliseconds, and
	// the server refuses a larger value.
	MaxServerTimeout = (1<<31 - 1) * time.Millisecond
)

// Config sets how a lease confirms its session. The zero Config uses the
// defaults; [Lock] is Config{}.Lock.
//
// The durations derive from each other: a Config that sets Deadline gets
// Heartbeat = Deadline/5 and ServerTimeout = 2 × Deadline where they are
// zero; one that sets only ServerTimeout gets Deadline = ServerTimeout/2,
// at most DefaultDeadline;
// one that sets only Heartbeat gets Deadline = 5 × Heartbeat; one that sets
// Heartbeat and ServerTimeout gets the Deadline of the ServerTimeout, or,
// where that is not longer than the Heartbeat, min(ServerTimeout/2, 5 ×
// Heartbeat), or halfway between them. A derived Heartbeat is at least MinHeartbeat. No zero field
// is refused for a derived value: a refusal names the field the user set
// that is out of range (a Deadline of MinHeartbeat or less, a
// ServerTimeout of twice that or less).
//
// The deadline rule: a lease is lost once no heartbeat sent in the last
// Deadline has been confirmed, and Lock sets the session's server timeouts so
// that PostgreSQL frees the lock of a silent session no sooner than
// ServerTimeout after the last heartbeat it received, which it received after
// that heartbeat was sent. Deadline < ServerTimeout therefore makes a silent
// lease lost before the server could free its lock, as long as the two
// machines' clocks run at the same rate (they measure intervals, not
// instants).
//
// The durations must keep MinHeartbeat ≤ Heartbeat < Deadline <
// ServerTimeout ≤ MaxServerTimeout; Lock refuses any other Config with an
// error that names the field and its bound. PostgreSQL counts the server's
// timeouts in whole milliseconds: Lock rounds ServerTimeout and Heartbeat up
// to the next millisecond, so that the server waits no less than asked.
type Config struct {
	// Heartbeat is the time between two heartbeats (DefaultHeartbeat if
	// zero), at least MinHeartbeat and shorter than Deadline. A heartbeat is
	// a statement that returns pg_backend_pid() and the session's marker
	// (see SessionPooler), sent on the lease's session without waiting for
	// the previous one's reply: a lease sends one every Heartbeat.
	Heartbeat time.Duration

	// Deadline is how long after sending a heartbeat the lease stays live
	// without a later one confirmed (DefaultDeadline if zero). It must be
	// longer than Heartbeat, and should be longer than Heartbeat plus the
	// round trip, or the lease is lost for nothing; it must be shorter than
	// ServerTimeout. It also bounds the server's answer to a cancel request
	// and to the release in [Lease.Unlock], and is how long a Lock on a
	// shared session waits, once granted after a release that no Unlock
	// announced, for the old holder's process to learn that its session
	// ended.
	Deadline time.Duration

	// ServerTimeout is the silence after which the server ends the lease's
	// session and frees its lock (DefaultServerTimeout if zero); it must be
	// longer than Deadline and at most MaxServerTimeout. Lock sets it for
	// the session as idle_session_timeout and tcp_user_timeout, and sets the
	// TCP keepalives so that they give up no sooner.
	ServerTimeout time.Duration

	// Fence, if not nil, names a table (key bigint primary key, token bigint
	// not null) in which Lock takes the lease's fencing token, in the
	// lease's session once the lock is granted: see [Lease.Token]. It has
	// one to three parts (table, schema.table, database.schema.table), none
	// empty or longer than 63 bytes, which PostgreSQL would cut short. An
	// unqualified name is looked up in the session's search_path: name the
	// schema.
	Fence pgx.Identifier

	// SessionPooler declares that the pool's connections reach the server
	// through a pooler in session mode, such as PgBouncer with pool_mode =
	// session, which gives each client connection a server connection of its
	// own until the client disconnects. Lock refuses a connection whose
	// server process is not the one it reported at startup ([ErrPooled]):
	// that is the mark of every pooler, and in transaction or statement mode
	// a pooler lets two clients share a session and its locks.
	//
	// With SessionPooler set, Lock takes the lease on such a connection
	// once it has checked, before it changes anything in the session and
	// within Deadline, that the pooler does not share the session: it opens
	// a second connection with the pool's configuration, whose statements,
	// sent right after the session's own, must reach another server process,
	// always the same, without the mark of any lease (PgBouncer reuses the
	// server connection a client just released, last in first out); else it
	// fails with ErrPooled before it takes the lock, and the session keeps
	// the server's settings. Lock then sets its timeouts and marks the
	// session with a random value (set_config, for the session). Every later
	// statement, the lock's among them, runs only in the marked session, and
	// every heartbeat must come back from it: one that does not loses a live
	// lease with ErrPooled.
	SessionPooler bool

	// Sessions bounds the shared sessions that the leases taken from one
	// pool with one Config use (DefaultSessions if zero; negative is
	// refused). Leases share a session: it holds their locks, and one
	// heartbeat confirms them all; a session's end loses every lease on it,
	// and no other. A pool opens a session for its first lease and another
	// once each of its sessions holds a thousand, up to Sessions; beyond,
	// the leases go to the least loaded. The default of 4 keeps a process
	// within a few server connections beside its pool's own (a server's
	// max_connections is 100 by default, a role's limit often 10 to 50),
	// and a session's end, at 10,000 leases, to a quarter of them. The
	// sessions are the issuer's: they are hijacked from the pool, which no
	// longer counts them, and no caller reaches them.
	Sessions int

	// OwnSession gives each lease a session of its own, as a lease had
	// before sessions were shared: Lock takes a connection out of the pool
	// for the lease's life, waits for the lock with pg_advisory_lock, and
	// Unlock closes it. A lease alone on its session is lost by the faults
	// of its session only, and each costs a server connection and a
	// heartbeat.
	OwnSession bool

	// Secret, if not empty, keys the derivation of the lock's key from the
	// subject: see [Config.Key]. Every process that takes the same locks must
	// use the same secret.
	Secret []byte

	// Observer, if not nil, is told of each lease's grant, confirmed
	// heartbeats (its renewals), risk, loss and release
	// ([health.Observer]): AtRisk after a confirmation that left less than
	// a third of the deadline's span, and, with [health.ErrUnconfirmed],
	// when a third is left and the session confirmed nothing since (one
	// timer a session, fanned out to its observed leases). No heartbeat
	// fails without ending its session, so no RenewalFailed is told. Nil
	// reports nothing and costs nothing: no event is built, no timer armed.
	Observer health.Observer
}

// withDefaults returns c with the defaults for its zero durations, or an
// error naming the field that is out of range.
func (c Config) withDefaults() (Config, error) {
	derived := c.Deadline == 0 // the Deadline derives from the Heartbeat or the ServerTimeout set
	if c.Deadline == 0 {
		switch {
		case c.ServerTimeout > 0:
			c.Deadline = min(c.ServerTimeout/timeoutPerDeadline, DefaultDeadline)
			if c.Heartbeat > 0 && c.Deadline <= c.Heartbeat {
				// A Heartbeat set too long for that Deadline: the Deadline
				// that keeps heartbeatsPerDeadline of them if the server's
				// timeout leaves room, else halfway from the Heartbeat to
				// the ServerTimeout, where the holder's heartbeat and the
				// server's margin each keep a share. Between them, not a
				// refusal of a value the user did not set.
				c.Deadline = min(c.ServerTimeout/timeoutPerDeadline, c.Heartbeat*heartbeatsPerDeadline)
				if c.Deadline <= c.Heartbeat {
					c.Deadline = c.Heartbeat + (c.ServerTimeout-c.Heartbeat)/2
				}
			}
		case c.Heartbeat > 0:
			c.Deadline = c.Heartbeat * heartbeatsPerDeadline
		default:
			c.Deadline = DefaultDeadline
		}
	}
	derivedHeartbeat := c.Heartbeat == 0
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
		if c.Deadline > 0 {
			c.Heartbeat = max(c.Deadline/heartbeatsPerDeadline, MinHeartbeat)
		}
	}
	if c.ServerTimeout == 0 {
		c.ServerTimeout = DefaultServerTimeout
		if c.Deadline > 0 {
			c.ServerTimeout = min(c.Deadline*timeoutPerDeadline, MaxServerTimeout)
		}
	}
	if c.Sessions == 0 {
		c.Sessions = DefaultSessions
	}
	switch {
	case c.Sessions < 0:
		return c, fmt.Errorf("Config.Sessions %d is negative: it bounds the shared sessions of a pool", c.Sessions)
	case c.Heartbeat < MinHeartbeat:
		return c, fmt.Errorf("Config.Heartbeat %v is under its floor %v: each heartbeat is a statement the server runs", c.Heartbeat, MinHeartbeat)
	case c.Deadline <= c.Heartbeat && derived && c.ServerTimeout > 0 && !derivedHeartbeat:
		return c, fmt.Errorf("Config.Heartbeat %v is not shorter than Config.ServerTimeout %v: no Deadline fits between them", c.Heartbeat, c.ServerTimeout)
	case c.Deadline <= c.Heartbeat && derived && derivedHeartbeat:
		return c, fmt.Errorf("Config.ServerTimeout %v is not over its floor %v: the Deadline derived from it, %v, must be longer than MinHeartbeat %v, the shortest Heartbeat",
			c.ServerTimeout, MinHeartbeat*timeoutPerDeadline, c.Deadline, MinHeartbeat)
	case c.Deadline <= c.Heartbeat && derivedHeartbeat:
		return c, fmt.Errorf("Config.Deadline %v is not over its floor: it must be longer than MinHeartbeat %v, the shortest Heartbeat", c.Deadline, MinHeartbeat)
	case c.Deadline <= c.Heartbeat:
		return c, fmt.Errorf("Config.Deadline %v is not longer than Config.Heartbeat %v: the lease would be lost between two heartbeats", c.Deadline, c.Heartbeat)
	case c.ServerTimeout < time.Millisecond:
		return c, fmt.Errorf("Config.ServerTimeout %v is under 1ms: PostgreSQL counts it in whole milliseconds, and 0 turns its timeouts off", c.ServerTimeout)
	case c.ServerTimeout > MaxServerTimeout:
		return c, fmt.Errorf("Config.ServerTimeout %v is over its ceiling %v (2^31-1 ms): idle_session_timeout and tcp_user_timeout are int milliseconds", c.ServerTimeout, MaxServerTimeout)
	case c.Deadline >= c.ServerTimeout:
		return c, fmt.Errorf("Config.Deadline %v is not shorter than Config.ServerTimeout %v: the server could free the lock of a silent lease before the lease is lost", c.Deadline, c.ServerTimeout)
	}
	if c.Fence != nil {
		if err := checkIdentifier(c.Fence); err != nil {
			return c, fmt.Errorf("Config.Fence: %w", err)
		}
	}
	return c, nil
}

// maxIdentifier is the longest identifier PostgreSQL keeps
// (NAMEDATALEN−1); it cuts a longer one short, with a notice only.
const maxIdentifier = 63

// checkIdentifier refuses a table name that PostgreSQL would not take as
// written.
func checkIdentifier(id pgx.Identifier) error {
	if len(id) == 0 || len(id) > 3 {
		return fmt.Errorf("%d parts, want 1 to 3 (table, schema.table or database.schema.table)", len(id))
	}
	for _, part := range id {
		switch {
		case part == "":
			return errors.New("an empty part")
		case len(part) > maxIdentifier:
			return fmt.Errorf("the part %s is %d bytes long, over PostgreSQL's %d, which it would cut short", quote(part), len(part), maxIdentifier)
		case !utf8.ValidString(part) || containsNUL(part):
			return fmt.Errorf("the part %s is not valid UTF-8 without NUL bytes", quote(part))
		}
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// values returns the settings Lock makes for c, in the order of settings:
// the durations in whole milliseconds, rounded up, so that no timeout is
// shorter than asked (and none is 0, which is off).
func (c Config) values(shared bool) []string {
	ms := func(d time.Duration) string {
		return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10) + "ms"
	}
	idle := (c.ServerTimeout + time.Second - 1) / time.Second // whole seconds, rounded up
	lockTimeout := "0"
	if shared {
		// No statement of a shared session may wait long: its heartbeats
		// queue behind it. Only the fencing token's write can wait (for a
		// guarded write's row), and Lock retries it.
		lockTimeout = ms(fenceWait)
	}
	return []string{ms(c.ServerTimeout), ms(c.ServerTimeout), fmt.Sprintf("%ds", idle), "1s", "1", ms(c.Heartbeat), "0", lockTimeout}
}

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
