package health

import (
	"log/slog"
	"time"
)

// Kind names an event of a lease's life.
type Kind uint8

// The kinds of an [Event], in the order a lease meets them: one Granted,
// any number of Renewed, RenewalFailed and AtRisk, then one Lost or one
// Released.
const (
	// Granted: the lease was granted; Event.Wait is how long Lock waited.
	Granted Kind = iota + 1
	// Renewed: a renewal was confirmed; Event.Sent, RoundTrip, Deadline
	// and Margin describe it.
	Renewed
	// RenewalFailed: a renewal failed without losing the lease (the
	// issuer tries again); Event.Err is why, Event.Margin the time left
	// before the deadline in force.
	RenewalFailed
	// AtRisk follows a RenewalFailed, or a Renewed whose margin is thin
	// ([Thin]), at once: the lease is not lost, but will be unless the
	// next renewals are confirmed sooner.
	AtRisk
	// Lost: the lease was lost; Event.Err is the *lost.Error the signal
	// returns, Event.Via how the issuer learned it.
	Lost
	// Released: the holder released the lease; Event.Err is what Unlock
	// returned.
	Released
)

var kindNames = [...]string{"", "granted", "renewed", "renewal_failed", "at_risk", "lost", "released"}

// String returns the kind's name in lower case, as metrics and logs write it:
// "granted", "renewed", "renewal_failed", "at_risk", "lost", "released".
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Via says how an issuer learned of a loss.
type Via uint8

// The ways a loss is learned.
const (
	// Push: the server told the issuer without being asked (a watch event,
	// a key's invalidation, a session ended by the server).
	Push Via = iota + 1
	// Answer: the answer to a request of the issuer (a renewal, a
	// heartbeat) refused the lease or showed it gone.
	Answer
	// Deadline: no renewal was confirmed in time; the issuer's clock ran
	// out before the server's could.
	Deadline
)

var viaNames = [...]string{"", "push", "answer", "deadline"}

// String returns "push", "answer" or "deadline".
func (v Via) String() string {
	if int(v) < len(viaNames) && v != 0 {
		return viaNames[v]
	}
	return "unknown"
}

// Event is one event of a lease's life, as an issuer reports it. The
// fields a kind does not use are zero.
type Event struct {
	Kind    Kind
	Issuer  string // the issuer's package: "etcdlease", "redislease", …
	Subject string
	Token   int64

	// Wait is, for Granted, how long Lock waited for the grant.
	Wait time.Duration

	// Sent is the send time of the renewal a Renewed, RenewalFailed or
	// AtRisk event is about.
	Sent time.Time
	// RoundTrip is, for Renewed, the time from Sent to the confirmation.
	RoundTrip time.Duration
	// Deadline is the time the lease is lost at unless a renewal is
	// confirmed: for Renewed, the one the renewal set; for RenewalFailed
	// and AtRisk, the one in force.
	Deadline time.Time
	// Margin is the time left before Deadline: for Renewed, at the
	// confirmation; for RenewalFailed and AtRisk, when the issuer knew.
	Margin time.Duration

	// Err is, for RenewalFailed, the failure; for AtRisk, the failure
	// that put the lease at risk, or nil for a thin margin; for Lost, the
	// *lost.Error of the lease's signal; for Released, Unlock's error.
	Err error
	// Via is, for Lost, how the issuer learned of the loss.
	Via Via
}

// LogValue writes the fields that the event's kind uses.
func (e Event) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("issuer", e.Issuer), slog.String("subject", e.Subject), slog.Int64("token", e.Token))
	switch e.Kind {
	case Granted:
		attrs = append(attrs, slog.Duration("wait", e.Wait))
	case Renewed:
		attrs = append(attrs, slog.Duration("round_trip", e.RoundTrip), slog.Duration("margin", e.Margin), slog.Time("deadline", e.Deadline))
	case RenewalFailed, AtRisk:
		attrs = append(attrs, slog.Duration("margin", e.Margin), slog.Time("deadline", e.Deadline))
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
	case Lost:
		attrs = append(attrs, slog.String("via", e.Via.String()))
		if e.Err != nil {
			attrs = append(attrs, slog.Any("lost", e.Err))
		}
	case Released:
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
	}
	return slog.GroupValue(attrs...)
}

// Observer receives the events of the leases of the issuers it is set on.
//
// Observe is called on the issuer's own goroutines (the one that renews, the
// one that follows the server, the caller's of Lock and Unlock), after the
// fact it reports: a Lost event after the signal was lost, never between
// the issuer knowing and the loss. It must return quickly, must be safe for
// use by many goroutines at once, and must not call the methods of the
// lease it is told about. The events of one lease arrive in the order of
// [Kind]'s constants' doc; the Event and its fields must not be changed.
type Observer interface {
	Observe(e Event)
}

// ObserverFunc is an Observer that is a func.
type ObserverFunc func(e Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Health is the state of one lease's renewals, as its issuer's Lease
// returns it. The zero Health is a lease whose issuer has no deadline of its
// own (the in-process single-flight group, whose leases last until the
// flight is forgotten).
type Health struct {
	// Deadline is when the lease's signal is lost unless a renewal is
	// confirmed before it.
	Deadline time.Time
	// Renewed is the send time of the last confirmed renewal (of the grant
	// before the first renewal): the time the deadline counts from.
	Renewed time.Time
	// Margin is the time that was left before Deadline when that renewal
	// was confirmed.
	Margin time.Duration
}

// Left returns the time left before the deadline at now; negative past it,
// and 0 for a Health with no deadline.
func (h Health) Left(now time.Time) time.Duration {
	if h.Deadline.IsZero() {
		return 0
	}
	return h.Deadline.Sub(now)
}

// RiskDivisor sets the share of a renewal's span (from its send time to the
// deadline it sets) under which a confirmation is thin: less than a third
// left. A renewal whose round trip took two thirds of its span leaves the
// next one, sent a period later, no room for a round trip as slow.
const RiskDivisor = 3

// Thin reports whether a confirmation that left margin before a deadline
// span after its send is at risk: margin < span/[RiskDivisor].
func Thin(margin, span time.Duration) bool {
	return margin < span/RiskDivisor
}
