package mysqllease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// kickEvery is how often Unlock repeats its KILL QUERY while the heartbeat
// has not returned: a KILL QUERY that reaches the session between two
// heartbeats interrupts nothing, and the next one would run its whole
// Heartbeat.
const kickEvery = 50 * time.Millisecond

// kickTimeout bounds one KILL QUERY, a connection of the pool included.
const kickTimeout = time.Second

// Unlock releases the lease: it ends the signal first, so that nothing the
// server or the connection reports afterwards loses it; it interrupts the
// pending heartbeat with KILL QUERY, sent through another connection of
// the pool; it releases the lock with RELEASE_LOCK and closes the lease's
// connection, which ends its session.
//
// ctx bounds the wait for the interrupted heartbeat, after a first 50 ms
// that Unlock takes whatever ctx says: an Unlock with a context already
// cancelled, as a shutdown's deferred Unlock has, still releases the lock.
// The deadline (ServerTimeout − Margin) bounds that wait and the release,
// whatever ctx says, and each KILL QUERY is bounded by 1 s. A KILL QUERY
// that reaches the session late may interrupt the RELEASE_LOCK: Unlock then
// ends the session instead ([ErrSessionEnded]), which frees the lock too.
//
// Unlock returns nil once RELEASE_LOCK released the lock. Otherwise the
// lock was freed, or will be, by the end of the session, and the error says
// which: it wraps [ErrSessionEnded] when ctx ended before the heartbeat
// returned, or the release failed (the server frees the lock when it sees
// the session end, at the latest ServerTimeout after it last heard from
// it); it wraps the loss when the lease was lost before Unlock. Either way
// the signal was never lost by the release, and the fencing token still
// refuses the holder's writes once another holder has taken the lock.
// Successive calls return the first call's result.
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("mysqllease: Unlock called with a nil context")
	}
	if l.ctrl == nil {
		panic("mysqllease: Unlock called on a Lease not made by Lock")
	}
	l.once.Do(func() {
		if err := l.release(ctx); err != nil {
			l.err = fmt.Errorf("mysqllease: unlock %s: %w", quote(l.ctrl.Subject()), err)
		}
	})
	return l.err
}

func (l *Lease) release(ctx context.Context) error {
	ended := l.ctrl.End()
	l.stopping.Store(true)
	if !ended {
		<-l.kept
		return lostBefore{l.ctrl.Signal().Err()}
	}
	l.timer.Stop()
	defer l.unclaim()
	// The first KILL QUERY gets kickEvery to end the heartbeat whatever ctx
	// says, so that an Unlock with a context already cancelled, as a
	// shutdown's deferred Unlock has, still releases the lock; the KILL
	// itself and the release are bounded by their own timeouts.
	var cut error
	var ctxDone <-chan struct{}
	bound := time.NewTimer(l.cfg.deadline())
	defer bound.Stop()
	for cut == nil && !isClosed(l.kept) {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kickTimeout)
		l.s.kill(kctx, "QUERY")
		cancel()
		wait := time.NewTimer(kickEvery)
		select {
		case <-l.kept:
		case <-wait.C:
		case <-ctxDone:
			cut = fmt.Errorf("the release's context ended: %w", context.Cause(ctx))
		case <-bound.C:
			cut = fmt.Errorf("the heartbeat did not return within the deadline %v of the first KILL QUERY", l.cfg.deadline())
		}
		if cut != nil {
			l.hcancel() // closes the connection under the heartbeat
			<-l.kept
		}
		wait.Stop()
		ctxDone = ctx.Done()
	}
	defer l.s.discard()
	if cut != nil {
		return fmt.Errorf("%w: %w", ErrSessionEnded, cut)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.deadline())
	defer cancel()
	if err := l.s.release(rctx, l.name); err != nil {
		return fmt.Errorf("%w: release the lock: %w", ErrSessionEnded, err)
	}
	l.hcancel()
	return nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
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
