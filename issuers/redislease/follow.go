package redislease

import (
	"context"
	"fmt"
	"time"
)

// follow tracks the key on fc, a connection with CLIENT TRACKING on, until
// ctx ends or the lease is lost. Redis pushes an invalidation to fc when any
// client changes the key (this lease's renewals too), when it expires or is
// evicted, and when the database is flushed; follow then reads the key and
// its expiry at once, which also tracks it again, and loses the lease if it
// is gone ([ErrDeleted]), holds another value ([ErrTakenOver]), or expires
// before the deadline ([ErrExpired], through the deadline).
//
// The end of a connection is not a loss: follow dials again, turns tracking
// on and reads the key, and the deadline covers the time the key went
// untracked. A connection that reaches a replica ([ErrFailedOver]) or a
// server without the key is a loss.
func (l *Lease) follow(ctx context.Context, fc *conn) {
	defer func() {
		if fc != nil {
			fc.close()
		}
	}()
	pause := retryPause / 10 // grows to retryPause while dials fail
	flushed := false
	for ctx.Err() == nil {
		if fc == nil {
			var err error
			fc, err = l.ep.dial(ctx, true)
			if err == nil {
				if fc.role() != "master" {
					l.lose(fmt.Errorf("%w: a reconnection reached a server whose role is %s", ErrFailedOver, fc.role()))
					return
				}
				if _, err = fc.do(ctx, "CLIENT", "TRACKING", "ON"); err != nil {
					fc.close()
					if permanent(err) {
						// The ACL no longer lets the lease learn of a
						// change: nothing else would tell it.
						l.lose(fmt.Errorf("%w: CLIENT TRACKING ON on a reconnection to %s: %w", ErrRefused, fc.addr(), err))
						return
					}
				}
			}
			if err != nil {
				fc = nil
				sleep(ctx, pause)
				pause = min(2*pause, retryPause)
				continue
			}
			if !l.check(ctx, fc, "a reconnection to "+fc.addr(), false) {
				return
			}
			select {
			case <-fc.dead: // the read failed: the pause grows
			default:
				pause = retryPause / 10
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-fc.dead:
			// A read that keeps failing (ASK while the key's slot
			// migrates, LOADING) must not turn into a storm of dials.
			fc.close()
			fc = nil
			sleep(ctx, pause)
			pause = min(2*pause, retryPause)
			continue
		case p := <-fc.pushes:
			flushed = len(p) > 1 && p[1] == nil
		}
		what := "an invalidation of the key"
		if flushed {
			what = "an invalidation of every key (FLUSHALL or FLUSHDB)"
		}
		if !l.check(ctx, fc, what, flushed) {
			return
		}
	}
}

// check reads the key and its expiry on fc, after what, and loses the lease
// if the key is no longer this lease's. It returns false if the lease was
// lost; a failed read returns true, and leaves fc to be dialed again.
func (l *Lease) check(ctx context.Context, fc *conn, what string, flushed bool) bool {
	rctx, cancel := context.WithDeadline(ctx, l.deadline.current())
	defer cancel()
	applied := l.deadline.lastApplied()
	sent := time.Now()
	rs, err := fc.pipe(rctx, []any{"GET", l.key}, []any{"PTTL", l.key})
	answered := time.Now()
	if err != nil || rs[0].err != nil || rs[1].err != nil {
		if err == nil {
			if addr, ok := redirected(rs[0].err, "MOVED"); ok {
				l.ep.redirect(addr)
			}
		}
		fc.fail(fmt.Errorf("the read of the key failed"))
		return true
	}
	v, _ := rs[0].v.(string)
	switch {
	case rs[0].v == nil:
		cause := ErrDeleted
		how := "found no key"
		switch {
		case flushed:
			how = "found no key: the database was flushed"
		case fc.addr() != *l.server.Load():
			cause, how = ErrFailedOver, fmt.Sprintf("found no key on %s, which is not the server it was last confirmed on, %s", fc.addr(), *l.server.Load())
		}
		l.lose(fmt.Errorf("%w: the read after %s %s", cause, what, how))
		return false
	case v != l.value:
		l.lose(fmt.Errorf("%w: the read after %s found the key holding %q, not %q", ErrTakenOver, what, v, l.value))
		return false
	}
	// Redis read the key between sent and answered, and it expires ms
	// later. The lease's own writes, the last of them applied before sent,
	// keep it until applied plus the TTL at least: an expiry that comes
	// sooner, even counted from answered, was set by another client. The
	// lease is then lost before the earliest time the key may expire.
	// Redis keeps times to the millisecond, and its cached clock may be a
	// millisecond or two behind this process's: an expiry short by less
	// than a quarter of the margin is the lease's own.
	ms, _ := rs[1].v.(int64)
	if ms >= 0 && answered.Add(time.Duration(ms)*time.Millisecond+l.cfg.Margin/4).Before(applied.Add(l.cfg.TTL)) {
		expires := sent.Add(time.Duration(ms) * time.Millisecond)
		l.deadline.shorten(expires, fmt.Errorf("%w: the read after %s, sent at %s, found the key expiring in %d ms, at %s, before the deadline less the margin %v",
			ErrExpired, what, clock(sent), ms, clock(expires), l.cfg.Margin))
	}
	return true
}
