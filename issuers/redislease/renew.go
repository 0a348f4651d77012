package redislease

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// renew renews the key every RenewPeriod from the grant sent at granted,
// until ctx ends or the lease is lost. lc is the connection the grant was
// written on; renew dials another when it fails, and leaves the last one
// to Unlock.
//
// Each renewal is the renew script and, where replicas must acknowledge it,
// WAIT, in one write on one connection: WAIT counts the replicas that have
// everything this connection wrote. A renewal that found the key gone or
// another value in it loses the lease at once; one that failed, timed out,
// or reached fewer replicas than needed is tried again after a pause, and
// moves nothing: only the deadline says that silence lasted too long.
func (l *Lease) renew(ctx context.Context, lc *conn, granted time.Time) {
	defer func() {
		// Unlock deletes the key on the connection that renewed it, so
		// that a release needs no new connection: one refused at a
		// server's connection limit would leave the key to its expiry. A
		// lost lease keeps nothing open.
		if lc != nil && l.ctrl.Signal().Err() == nil {
			l.lc = lc
		} else if lc != nil {
			lc.close()
		}
	}()
	ttl := strconv.FormatInt(l.cfg.TTL.Milliseconds(), 10)
	pause := min(retryPause, l.cfg.RenewPeriod/4)
	t := time.NewTimer(time.Until(granted.Add(l.cfg.RenewPeriod)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A renewal is abandoned at the deadline: its answer could no
		// longer move it.
		rctx, cancel := context.WithDeadline(ctx, l.deadline.current())
		if lc == nil {
			var err error
			if lc, err = l.ep.dial(rctx, true); err != nil {
				cancel()
				lc = nil
				t.Reset(pause)
				continue
			}
		}
		cmds := [][]any{{"EVAL", renewScript, "2", l.key, l.ckey, l.value, ttl}}
		if l.need > 0 {
			wait := max(1, min(l.cfg.RenewPeriod, time.Until(l.deadline.current())).Milliseconds())
			cmds = append(cmds, []any{"WAIT", strconv.Itoa(l.need), strconv.FormatInt(wait, 10)})
		}
		sent := time.Now() // before the send: never later than Redis runs it
		rs, err := lc.pipe(rctx, cmds...)
		server := lc.addr()
		if err == nil && code(rs[0].err) == "ASK" {
			rs, server, err = l.renewAsking(rctx, rs[0].err, cmds)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.renewalFailed(sent, err)
			lc.close()
			lc = nil
			t.Reset(pause)
			continue
		}
		if err := rs[0].err; err != nil {
			switch {
			case readOnly(err):
				l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s: %w", ErrFailedOver, clock(sent), err))
				return
			case permanent(err):
				l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s: %w", ErrRefused, clock(sent), err))
				return
			}
			// LOADING, BUSY, MOVED, TRYAGAIN: another server, or the same
			// one later.
			if addr, ok := redirected(err, "MOVED"); ok {
				l.ep.redirect(addr)
			}
			l.renewalFailed(sent, err)
			lc.close()
			lc = nil
			t.Reset(pause)
			continue
		}
		switch v := rs[0].v.(type) {
		case string:
			l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s found the key holding %q, not %q", ErrTakenOver, clock(sent), v, l.value))
			return
		case int64:
			if v == 0 {
				l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s found no key", ErrDeleted, clock(sent)))
				return
			}
		}
		l.deadline.apply(sent)
		l.setServer(server)
		if l.need > 0 {
			if err := rs[1].err; permanent(err) {
				l.loseAnswer(fmt.Errorf("%w: the renewal's WAIT sent at %s: %w", ErrRefused, clock(sent), err))
				return
			}
			acked, _ := rs[1].v.(int64)
			if rs[1].err != nil || acked < int64(l.need) {
				// Only the primary has it: the replica promoted in its
				// place would expire the key at the last confirmed
				// write's expiry.
				l.renewalFailed(sent, errUnacked(rs[1].err, acked, l.need))
				t.Reset(pause)
				continue
			}
		}
		l.deadline.confirm(sent)
		t.Reset(time.Until(sent.Add(l.cfg.RenewPeriod)))
	}
}

// renewAsking sends the renewal cmds to the Cluster node an ASK redirection
// names, behind ASKING, as a Cluster client does: the key's slot is
// migrating, and the key has moved to that node already. Until the slot is
// reassigned, the renewal is confirmed there or nowhere.
// It returns the replies and the address of the node that gave them.
func (l *Lease) renewAsking(ctx context.Context, ask error, cmds [][]any) ([]reply, string, error) {
	addr, ok := redirected(ask, "ASK")
	if !ok {
		return nil, "", ask
	}
	cn, err := l.ep.dialAt(ctx, false, addr)
	if err != nil {
		return nil, "", err
	}
	defer cn.close()
	rs, err := cn.pipe(ctx, append([][]any{{"ASKING"}}, cmds...)...)
	if err != nil {
		return nil, "", err
	}
	if rs[0].err != nil {
		return nil, "", rs[0].err
	}
	return rs[1:], cn.addr(), nil
}
