package redislease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease"
)

// retryPause spaces the attempts after a failure, at most; the first retry
// comes after a tenth of it, and each next one after twice as long.
const retryPause = 200 * time.Millisecond

// grant is what acquireShared hands to the lease: its session, the server
// that granted the key, its token, the send time of the write that granted
// the key, and the replicas every later write must reach.
type grant struct {
	addr  string   // the server of a session's grant
	sess  *session // the session of a session's grant, with a reference
	token int64
	sent  time.Time
	need  int
}

// errUnsettled reports a primary behind Sentinel none of whose replicas
// has followed it for the TTL yet (see Config.replicas).
var errUnsettled = errors.New("no replica has followed the primary for the TTL yet")

// errSplit reports a session's two connections dialed on either side of a
// failover: they reached two servers, and are dialed again.
var errSplit = errors.New("the session's two connections reached two servers")

// replicas returns how many replicas must acknowledge the lease's writes:
// c.Replicas, or every replica the primary lists as connected, and at
// least one behind Sentinel. Behind Sentinel, it returns errUnsettled
// until one of them has followed the primary for the TTL.
//
// Both rules stop a primary that Sentinel replaced while it was paused,
// and that believes itself the primary once it is back, from granting a
// key that the new primary grants too:
//
//   - its replicas follow the new primary, so it lists none: a grant there
//     would be confirmed by none (a primary that truly lost every replica
//     looks the same, and no failover could replace it anyway);
//   - a replica that Sentinel has not yet moved to the new primary still
//     follows it, and may confirm a grant there, which is then held until
//     its deadline, a TTL after it was sent at the most; once moved, the
//     replica could at once confirm a grant on the new primary. A grant
//     there waits until one of its replicas has followed it for the TTL,
//     past every deadline of a grant that replica confirmed for the old
//     one.
//
// CLIENT LIST tells how long each replica has been connected, in whole
// seconds.
//
// Its commands are sent with send: lc is shared, and a cut ctx must not
// break it.
func (c Config) replicas(ctx context.Context, lc *conn, sentinel bool, send func(context.Context, ...[]any) ([]reply, error)) (int, error) {
	if c.Replicas > 0 && !sentinel {
		return c.Replicas, nil
	}
	cmds := [][]any{{"ROLE"}}
	if sentinel {
		cmds = append(cmds, []any{"CLIENT", "LIST", "TYPE", "replica"})
	}
	rs, err := send(ctx, cmds...)
	if err == nil && rs[0].err != nil {
		err = fmt.Errorf("ROLE (Config.Replicas does without it, except behind Sentinel): %w", rs[0].err)
	}
	if err == nil && sentinel && rs[1].err != nil {
		err = fmt.Errorf("CLIENT LIST (behind Sentinel, the lease reads how long each replica has followed the primary): %w", rs[1].err)
	}
	if err != nil {
		return 0, err
	}
	l, _ := rs[0].v.([]any)
	if len(l) < 3 || l[0] != "master" {
		role := "unknown"
		if len(l) > 0 {
			role = fmt.Sprint(l[0])
		}
		return 0, &serverError{msg: fmt.Sprintf("READONLY the server is not a primary: a replica's address? (ROLE says %s)", role)}
	}
	reps, _ := l[2].([]any)
	need := len(reps)
	if !sentinel {
		if c.Replicas > 0 {
			need = c.Replicas
		}
		return need, nil
	}
	// Behind Sentinel, Config.Replicas is a floor under ROLE's count: a
	// replica left out could be the one promoted.
	need = max(need, c.Replicas, 1)
	list, _ := rs[1].v.(string)
	// CLIENT LIST's age is the difference of two whole seconds of the
	// server's clock, so an age of n proves only more than n-1 seconds:
	// more than the TTL, rounded up, proves the TTL.
	settle := int((c.TTL + time.Second - 1) / time.Second)
	settled, ages := 0, []string{}
	for line := range strings.Lines(list) {
		for field := range strings.FieldsSeq(line) {
			if age, ok := strings.CutPrefix(field, "age="); ok {
				ages = append(ages, age)
				if n, err := strconv.Atoi(age); err == nil && n > settle {
					settled++
				}
			}
		}
	}
	if settled == 0 {
		return 0, fmt.Errorf("%w: %s lists %d replicas, connected for %s s (more than %d s needed)", errUnsettled, lc.addr(), len(reps), strings.Join(ages, ", "), settle)
	}
	return need, nil
}

// code returns the first word of a Redis error reply, or "".
func code(err error) string {
	var se *serverError
	if errors.As(err, &se) {
		return se.code()
	}
	return ""
}

// readOnly reports whether err says the server is a replica: READONLY, or a
// script's error that carries it, as Redis before 7 wraps it ("ERR Error
// running script ... -READONLY ...").
func readOnly(err error) bool {
	var se *serverError
	return errors.As(err, &se) && (se.code() == "READONLY" || strings.Contains(se.msg, "-READONLY "))
}

// redirected returns the address a Cluster's MOVED or ASK (as want says)
// sends a command to: "MOVED slot host:port".
func redirected(err error, want string) (string, bool) {
	var se *serverError
	if !errors.As(err, &se) || se.code() != want {
		return "", false
	}
	f := strings.Fields(se.msg)
	if len(f) < 3 {
		return "", false
	}
	return f[2], true
}

// transient reports whether err is an answer a Cluster or a server gives
// for a moment: a slot moving, a server loading its data or busy. Not a
// mistake, even on a Lock's first attempt.
func transient(err error) bool {
	if errors.Is(err, errSplit) {
		return true
	}
	switch code(err) {
	case "ASK", "MOVED", "TRYAGAIN", "LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN":
		return true
	}
	return false
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

// acquireShared waits until the lease id holds key on a session of rdb,
// and returns the grant, with a reference to the session. If try, it does
// not wait for another lease to let go: an attempt whose grant script
// finds the key or its claim another lease's returns an error wrapping
// [lease.ErrHeld].
//
// An attempt is the grant script, and WAIT where the server has replicas,
// in one write on the session's command connection, which dials nothing
// once the session is up; behind Sentinel, the replicas' ages before it
// and a Sentinel's name of the primary after it. The script reads the key
// and its claim, which tracks them (the session's connection tracks every
// key it reads), so a release or a deletion wakes a waiting Lock at once,
// as does a release by a lease of the same session, which Redis does not
// push to it (NOLOOP). On a Cluster the session is that of the node that
// serves the key's slot, found again after a MOVED or a failed attempt.
//
// A failure of the first attempt (a wrong address or password, a missing
// permission, a replica's address) is a mistake, returned at once; a later
// one is retried, with a pause that grows, unless no retry can mend it.
func (c Config) acquireShared(ctx context.Context, rdb redis.UniversalClient, ep *endpoint, key, tkey, ckey, id string, try bool) (g grant, err error) {
	k := sessKey{rdb: rdb}
	if ep.cluster != nil {
		opt, e := ep.options(ctx, false)
		if e != nil {
			return g, e
		}
		k.node = opt.Addr
	}
	s := join(k, ep, c.TTL)
	woken, unwait := s.wait(key, ckey)
	defer func() {
		unwait()
		if err != nil {
			s.leave()
		}
	}()
	// On a Cluster, after a failure the next attempt goes to the node a
	// MOVED named (to), or that the Cluster's map names (rehome).
	to, rehome := "", false
	first := true // a failure of the first attempt is a mistake
	sent := false // a grant script was sent: the key may be this lease's
	pause := retryPause / 10
	var last error
	fail := func(e error) error {
		err := lockError(ctx, e, last) // decided before giveUp, which may outlast ctx
		if sent {
			s.giveUp(c, key, ckey, id)
		}
		return err
	}
	backoff := func() {
		sleep(ctx, pause)
		pause = min(2*pause, retryPause)
	}
	for {
		if ctx.Err() != nil {
			return g, fail(ctx.Err())
		}
		if ep.cluster != nil && (to != "" || rehome) {
			nk := sessKey{rdb: rdb, node: to}
			if to == "" {
				nk = s.key
				if opt, e := ep.options(ctx, true); e == nil {
					nk.node = opt.Addr
				}
			}
			to, rehome = "", false
			if nk != s.key {
				unwait()
				s.leave()
				s = join(nk, ep, c.TTL)
				woken, unwait = s.wait(key, ckey)
			}
		}
		gen, dialed, e := s.current(ctx)
		if e != nil {
			if first && dialed && !transient(e) || permanent(e) || ctx.Err() != nil {
				return g, fail(e)
			}
			rehome = true
			first = false
			last = e
			backoff()
			continue
		}
		need := c.Replicas
		if s.ep.sentinel {
			// Behind Sentinel, the replicas are read before each grant: a
			// grant needs one that has followed the primary for the TTL
			// (see Config.replicas).
			if s.ep.clientClosed() {
				return g, fail(fmt.Errorf("the client was closed while Lock waited: %w", redis.ErrClosed))
			}
			rctx, cancel := context.WithTimeout(ctx, c.TTL)
			need, e = c.replicas(rctx, gen.cmd, true, func(ctx context.Context, cmds ...[]any) ([]reply, error) {
				return gen.cmd.pipeShared(ctx, s.bound, cmds...)
			})
			timedOut := rctx.Err() != nil
			cancel()
			if ctx.Err() != nil {
				return g, fail(ctx.Err())
			}
			if errors.Is(e, errUnsettled) {
				first = false
				last = e
				backoff()
				continue
			}
			if e != nil {
				if first && !transient(e) && isServerError(e) || permanent(e) {
					return g, fail(e)
				}
				if !isServerError(e) || readOnly(e) || timedOut {
					s.drop(gen)
				}
				first = false
				last = e
				backoff()
				continue
			}
		} else if need == 0 {
			if gen.roleErr != nil {
				return g, fail(gen.roleErr)
			}
			need = gen.replicas
		}
		cmds := [][]any{{"EVAL", grantScript, "3", key, tkey, ckey, id, strconv.FormatInt(c.TTL.Milliseconds(), 10)}}
		if need > 0 {
			cmds = append(cmds, []any{"WAIT", strconv.Itoa(need), strconv.FormatInt(max(1, (c.TTL/4).Milliseconds()), 10)})
		}
		// An attempt is bounded, so that a server that stopped answering
		// (paused, or cut off) is left for another, as Sentinel or Cluster
		// names it: a round trip slower than the TTL could not hold the
		// lease anyway.
		actx, cancel := context.WithTimeout(ctx, c.TTL)
		earlier := sent
		at := time.Now() // before the send: never later than Redis runs it
		sent = true
		rs, e := gen.cmd.pipeShared(actx, s.bound, cmds...)
		timedOut := actx.Err() != nil
		cancel()
		if e == nil && rs[0].err != nil {
			e = fmt.Errorf("the grant script: %w", rs[0].err)
			if code(rs[0].err) == "NOPERM" && strings.Contains(rs[0].err.Error(), "key") {
				e = fmt.Errorf("the grant script, which writes the key %q, its token counter %q and its claim %q (an ACL must allow all three): %w", key, tkey, ckey, rs[0].err)
				// Name the claim where the ACL refuses it: a mistake's
				// path, so the read costs a Lock that works nothing.
				if cr, ce := gen.cmd.pipeShared(ctx, s.bound, []any{"GET", ckey}); ce == nil && code(cr[0].err) == "NOPERM" {
					e = fmt.Errorf("the read of the key's claim %q, which the lease writes beside the key %q and its token counter %q (an ACL must allow all three): %w", ckey, key, tkey, rs[0].err)
				}
			}
		}
		if e == nil && need > 0 && rs[1].err != nil {
			e = fmt.Errorf("WAIT: %w", rs[1].err)
		}
		if ctx.Err() != nil {
			return g, fail(ctx.Err())
		}
		if e != nil {
			if first && !transient(e) && isServerError(e) || permanent(e) {
				return g, fail(e)
			}
			if !isServerError(e) || readOnly(e) || timedOut {
				// The connection failed, timed out, or the server is a
				// replica now: the session dials again.
				s.drop(gen)
				rehome = true
			}
			if addr, ok := redirected(e, "MOVED"); ok {
				to = addr
			}
			first = false
			last = e
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
					last = fmt.Errorf("the key was taken on %s, but WAIT counted %d of the %d replicas it needs", gen.cmd.addr(), acked, need)
					if c.Replicas == 0 && !s.ep.sentinel {
						// A replica may be gone: learn ROLE again (behind
						// Sentinel, each attempt reads it).
						s.drop(gen)
					}
					backoff()
					continue
				}
			}
			if s.ep.sentinel {
				// Asked after the grant was confirmed: a primary that
				// Sentinel replaced before then is not named any more.
				if e := s.ep.checkPrimary(ctx, gen.cmd.addr()); e != nil {
					// Not a grant: the key is given back where it was
					// written, and the session dials the primary Sentinel
					// names.
					last = e
					s.release(ctx, gen, key, ckey, id)
					s.drop(gen)
					backoff()
					continue
				}
			}
			return grant{token: n, sent: at, need: need, addr: gen.cmd.addr(), sess: s}, nil
		}
		pause = retryPause / 10
		last = fmt.Errorf("the key is held by another lease, its expiry %d ms away", n)
		if try {
			sent = earlier
			return g, fail(fmt.Errorf("%w: %w", lease.ErrHeld, last))
		}
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
		case <-woken:
			t.Stop()
		}
	}
}

// giveUpTimeout bounds the release of a key that a Lock cut by its context
// may have taken.
const giveUpTimeout = 5 * time.Second

// giveUp deletes key and its claim ckey on the session if a grant script
// whose answer did not come, or came too late, gave them to the lease id.
func (s *session) giveUp(c Config, key, ckey, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(giveUpTimeout, c.TTL))
	defer cancel()
	_, at, _ := s.send(ctx, []any{"EVAL", releaseScript, "2", key, ckey, id}) // the keys expire if this fails
	at.wake(key)
	at.wake(ckey)
}

// release deletes key and its claim ckey on g, each if it holds the lease
// id, and wakes the session's Locks that wait for them. They expire if
// this fails.
func (s *session) release(ctx context.Context, g *generation, key, ckey, id string) {
	g.cmd.pipeShared(ctx, s.bound, []any{"EVAL", releaseScript, "2", key, ckey, id}) //nolint:errcheck // the keys expire if this fails
	s.wake(key)
	s.wake(ckey)
}

// lockError is the error of a Lock that stops at e: ctx's error once ctx
// is done, with the cause of the last attempt (or e, if the server gave
// it), and e otherwise.
func lockError(ctx context.Context, e, last error) error {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		// A read or dial bounded by ctx's deadline may time out a moment
		// before ctx reports it: report ctx's error all the same.
		<-ctx.Done()
	}
	if ctx.Err() == nil {
		return e
	}
	cause := last
	if isServerError(e) {
		cause = e
	}
	if cause == nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w (the last attempt: %w)", ctx.Err(), cause)
}
