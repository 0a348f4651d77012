// Package lost defines Error, the one error that reports the loss of a lease.
//
// A holder matches it with [errors.As], through any number of wraps, to learn
// that it lost the right to act and on what subject; [errors.Is] with the
// issuer's cause matches too, because Error unwraps to it.
package lost

import (
	"log/slog"
	"unicode/utf8"
)

// Error reports that a lease was lost: the holder no longer has the right to
// act for Subject. It carries the issuer's cause, if the issuer gave one.
//
// An Error is immutable once made, so one value is safely shared by every
// goroutine that observes the loss. Match it with [errors.As], never with ==
// or by its message. Errors are made only by [New]; a nil *Error is not an
// error value of this package and its methods panic.
type Error struct {
	subject string
	cause   error
}

// New returns an Error for the loss of the lease on subject, with cause as
// the issuer's reason; cause may be nil.
//
// Issuers normally get their Error from controller.Controller.Lose, which
// calls New once per lease; New is exported for adapters and for tests that
// need the holder's view of a loss without an issuer.
func New(subject string, cause error) *Error {
	return &Error{subject: subject, cause: cause}
}

// Subject returns what the lost lease gave the right to, such as a lock's
// key or an election's name.
func (e *Error) Subject() string { return e.subject }

// Unwrap returns the issuer's cause, or nil when the issuer gave none.
func (e *Error) Unwrap() error { return e.cause }

// Error returns "lease lost", then ": " and the subject, then ": " and the
// cause, each left out when empty:
// "lease lost: orders: the coordinator refused the claim".
// A subject longer than [MaxQuoted] bytes is cut there, at a character's
// start, and followed by "…": a subject is user input, and the message is
// logged with every loss. [Error.Subject] returns it whole.
func (e *Error) Error() string {
	msg := "lease lost"
	if e.subject != "" {
		msg += ": " + quoted(e.subject)
	}
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	}
	return msg
}

// LogValue makes an Error log as a group with the attributes subject (cut
// as in [Error.Error]) and, when there is one, cause.
func (e *Error) LogValue() slog.Value {
	if e.cause == nil {
		return slog.GroupValue(slog.String("subject", quoted(e.subject)))
	}
	return slog.GroupValue(slog.String("subject", quoted(e.subject)), slog.String("cause", e.cause.Error()))
}

// MaxQuoted is the most bytes of a subject that [Error.Error] and
// [Error.LogValue] quote.
const MaxQuoted = 128

// quoted returns subject cut to at most MaxQuoted bytes at a character's
// start, with "…" after it if it was cut.
func quoted(subject string) string {
	if len(subject) <= MaxQuoted {
		return subject
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(subject[cut]) {
		cut--
	}
	return subject[:cut] + "…"
}
