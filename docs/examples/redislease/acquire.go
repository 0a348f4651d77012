package redislease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// retryPause spaces the attempts after a failure, at most; the first retry
// comes after a tenth of it, and each next one after twice as long.
const retryPause = 200 * time.Millisecond

// grant is what acquire hands to the lease: its two connections, its token,
// the send time of the write that granted the key, and the replicas every
// later write must reach.
type grant struct {
	lc, fc *conn
	token  int64
	sent   time.Time
	need   int
}

// acquire waits until the lease id holds key, and returns the grant.
//
// It dials two connections of its own: lc runs the grant script and WAIT,
// fc tracks the key (CLIENT TRACKING), so that a release, a deletion or an
// expiry of the key wakes it at once. A failure of the first attempt (a
// wrong address or password, a missing permission, a replica's address) is
// a mistake, returned at once; a later one is retried, with a pause that
// grows, unless no retry can mend it.
func (c Config) acquire(ctx context.Context, ep *endpoint, key, tkey, id string) (g grant, err error) {
	var lc, fc *conn
	defer func() {
		if err != nil {
			for _, cn := range []*conn{lc, fc} {
				if cn != nil {
					cn.close()
				}
			}
		}
	}()
	first := true // a failure of the first attempt is a mistake
	sent := false // a grant script was sent: the key may be this lease's
	pause := retryPause / 10
	fail := func(e error) error {
		if sent {
			c.giveUp(ep, key, id)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return e
	}
	backoff := func() {
		sleep(ctx, pause)
		pause = min(2*pause, retryPause)
	}
	for {
		if lc == nil || fc == nil {
			var e error
			if lc == nil {
				lc, e = ep.dial(ctx, !first)
			}
			if e == nil && fc == nil {
				if fc, e = ep.dial(ctx, !first); e == nil {
					if _, e = fc.do(ctx, "CLIENT", "TRACKING", "ON"); e != nil {
						fc.close()
						fc = nil
						e = fmt.Errorf("CLIENT TRACKING ON: %w", e)
					}
				}
			}
			if e != nil {
				if first || permanent(e) || ctx.Err() != nil {
					return g, fail(e)
				}
				backoff()
				continue
			}
		}
		// An attempt is bounded, so that a server that stopped answering
		// (paused, or cut off) is left for another, as Sentinel or Cluster
		// names it: a round trip slower than the TTL could not hold the
		// lease anyway.
		actx, cancel := context.WithTimeout(ctx, c.TTL)
		need, e := c.replicas(actx, lc)
		var rs []reply
		var at time.Time
		if e == nil {
			// Read first, so that tracking covers every change after the
			// script's answer.
			_, e = fc.do(actx, "GET", key)
		}
		if e == nil {
			cmds := [][]any{{"EVAL", grantScript, "2", key, tkey, id, strconv.FormatInt(c.TTL.Milliseconds(), 10)}}
			if need > 0 {
				cmds = append(cmds, []any{"WAIT", strconv.Itoa(need), strconv.FormatInt(max(1, (c.TTL/4).Milliseconds()), 10)})
			}
			at = time.Now() // before the send: never later than Redis runs it
			sent = true
			rs, e = lc.pipe(actx, cmds...)
			if e == nil && rs[0].err != nil {
				e = fmt.Errorf("the grant script: %w", rs[0].err)
			}
			if e == nil && need > 0 && rs[1].err != nil {
				e = fmt.Errorf("WAIT: %w", rs[1].err)
			}
		}
		cancel()
		if ctx.Err() != nil {
			return g, fail(ctx.Err())
		}
		if e != nil {
			if first || permanent(e) {
				return g, fail(e)
			}
			// The connection failed, or the server is not the primary
			// any more: dial again (a Sentinel or Cluster client finds
			// the new one).
			lc, fc = dropDead(lc, !isServerError(e) || code(e) == "READONLY" || code(e) == "MOVED"), dropDead(fc, false)
			backoff()
			continue
		}
		first = false
		res, _ := rs[0].v.([]any)
		if len(res) != 2 {
			return g, fail(fmt.Errorf("the grant script answered %v", rs[0].v))
		}
		ok, _ := res[0].(int64)
		n, _ := res[1].(int64)
		if ok == 1 {
			if need > 0 {
				if acked, _ := rs[1].v.(int64); acked < int64(need) {
					// Taken on the primary, not yet on enough replicas:
					// not a grant until they have it. The next attempt
					// sets the expiry again.
					backoff()
					continue
				}
			}
			return grant{lc: lc, fc: fc, token: n, sent: at, need: need}, nil
		}
		pause = retryPause / 10
		// Held by another: wait for its key to change (tracking), to
		// expire, or for the retry period.
		wait := c.RetryPeriod
		if n > 0 {
			wait = min(wait, time.Duration(n)*time.Millisecond+time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return g, fail(ctx.Err())
		case <-t.C:
		case <-fc.pushes:
			t.Stop()
		case <-fc.dead:
			t.Stop()
			fc.close()
			fc = nil
		}
	}
}

// dropDead closes cn and returns nil if cn failed, or if force; it returns
// cn otherwise.
func dropDead(cn *conn, force bool) *conn {
	if cn == nil {
		return nil
	}
	select {
	case <-cn.dead:
		force = true
	default:
	}
	if force {
		cn.close()
		return nil
	}
	return cn
}

// replicas returns how many replicas must acknowledge the lease's writes:
// c.Replicas, or every replica the primary lists as connected.
func (c Config) replicas(ctx context.Context, lc *conn) (int, error) {
	if c.Replicas > 0 {
		return c.Replicas, nil
	}
	v, err := lc.do(ctx, "ROLE")
	if err != nil {
		return 0, fmt.Errorf("ROLE (set Config.Replicas to do without it): %w", err)
	}
	l, _ := v.([]any)
	if len(l) < 3 || l[0] != "master" {
		role := "unknown"
		if len(l) > 0 {
			role = fmt.Sprint(l[0])
		}
		return 0, &serverError{msg: fmt.Sprintf("READONLY the server is not a primary: a replica's address? (ROLE says %s)", role)}
	}
	reps, _ := l[2].([]any)
	return len(reps), nil
}

// giveUpTimeout bounds the release of a key that a Lock cut by its context
// may have taken.
const giveUpTimeout = 5 * time.Second

// giveUp deletes key if a grant script whose answer did not come, or came
// too late, gave it to the lease id.
func (c Config) giveUp(ep *endpoint, key, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(giveUpTimeout, c.TTL))
	defer cancel()
	cn, err := ep.dial(ctx, false)
	if err != nil {
		return // the key expires
	}
	defer cn.close()
	script := `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. ':' then
  return redis.call('DEL', KEYS[1])
end
return 0
`
	cn.do(ctx, "EVAL", script, "1", key, id) //nolint:errcheck // the key expires if this fails
}

// code returns the first word of a Redis error reply, or "".
func code(err error) string {
	var se *serverError
	if errors.As(err, &se) {
		return se.code()
	}
	return ""
}

// permanent reports whether err is a refusal no retry mends: a missing
// permission, a wrong credential, a key of another type.
func permanent(err error) bool {
	switch code(err) {
	case "NOPERM", "WRONGPASS", "NOAUTH", "WRONGTYPE":
		return true
	}
	return false
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
