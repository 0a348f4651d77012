package health

import (
	"errors"
	"strings"
	"unicode"
)

// Cause returns a short, bounded name for the cause of a loss, for a
// metric's label: the message of the error that err's cause leads with (an
// issuer's sentinel: every issuer of this repository wraps one first, as in
// fmt.Errorf("%w: the renewal sent at …", ErrDeleted)), without its
// package's prefix; "other" for a leading error whose message carries
// digits (an address, a time: not a bounded name), and "" for nil.
//
// A *lost.Error is looked through: Cause(sig.Err()) names the issuer's
// cause.
func Cause(err error) string {
	if err == nil {
		return ""
	}
	if u := errors.Unwrap(err); u != nil && strings.HasPrefix(err.Error(), "lease lost") {
		err = u // a *lost.Error: its message is the subject's, then the cause's
	}
	for {
		next := leading(err)
		if next == nil {
			break
		}
		err = next
	}
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, ": "); ok && !strings.Contains(after, ": ") {
		msg = after // "redislease: key deleted" → "key deleted"
	}
	if strings.IndexFunc(msg, unicode.IsDigit) >= 0 || len(msg) > 64 {
		return "other"
	}
	return msg
}

// leading returns the error err wraps whose message err's own begins with,
// or nil.
func leading(err error) error {
	msg := err.Error()
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if e != nil && strings.HasPrefix(msg, e.Error()) {
				return e
			}
		}
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil && strings.HasPrefix(msg, e.Error()) {
			return e
		}
	}
	return nil
}
