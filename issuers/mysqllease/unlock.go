package mysqllease

import (
	"context"
	"errors"
	"fmt"
)

// Unlock releases the lease: it ends the signal first, so that nothing the
// server or the connection reports afterwards loses it, then releases the
// lock with one statement, RELEASE_LOCK, on the lease's shared session,
// which lives on for the other leases on it.
//
// ctx is not passed to the statement: its end would close the connection
// under every lease of the session. The deadline (ServerTimeout − Margin)
// bounds the statement instead, whatever ctx says, so that an Unlock with a
// context already cancelled, as a shutdown's deferred Unlock has, still
// releases the lock.
//
// Unlock returns nil once RELEASE_LOCK released the lock. Otherwise the
// lock was freed, or will be, by the end of the session, and the error says
// which: it wraps [ErrSessionEnded] when the session ended before or during
// the release (the server frees the lock when it sees the session end, at
// the latest ServerTimeout after it last heard from it); it wraps the loss
// when the lease was lost before Unlock. Either way the signal was never
// lost by the release, and the fencing token still refuses the holder's
// writes once another holder has taken the lock. Successive calls return
// the first call's result.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("mysqllease: Unlock called with a nil context")
	}
	if l.ctrl == nil {
		panic("mysqllease: Unlock called on a Lease not made by Lock")
	}
	l.once.Do(func() {
		defer l.released()
		if err := l.release(); err != nil {
			l.err = fmt.Errorf("mysqllease: unlock %s: %w", quote(l.ctrl.Subject()), err)
		}
	})
	return l.err
}

func (l *Lease) release() error {
	if !l.ctrl.End() {
		return lostBefore{l.ctrl.Signal().Err()}
	}
	if !l.m.detach(l) {
		// The session's end freed the lock; the session's own end lets the
		// process's next lease of it be granted.
		return fmt.Errorf("%w: the shared session had ended", ErrSessionEnded)
	}
	defer l.unclaim()
	if err := l.m.release(l.name); err != nil {
		return fmt.Errorf("%w: release the lock: %w", ErrSessionEnded, err)
	}
	return nil
}

// lostBefore is the error of an Unlock of a lease lost before it: it
// wraps the loss, a lost.Error, and says its cause without the subject,
// which the Unlock's error already names.
type lostBefore struct{ loss error }

func (e lostBefore) Error() string {
	cause := errors.Unwrap(e.loss)
	if cause == nil {
		cause = e.loss
	}
	return "the lease was lost before: " + cause.Error()
}

func (e lostBefore) Unwrap() error { return e.loss }
