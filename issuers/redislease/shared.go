package redislease

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A session is what the leases taken through one *redis.Client (not a
// Sentinel or Cluster client) share on its server: two connections of the
// issuer's own, whatever the number of leases, and four goroutines.
//
//   - cmd runs every script (grants, renewals, releases, reads) and WAIT,
//     with CLIENT TRACKING ON REDIRECT trk NOLOOP: every key a script reads
//     on it is tracked, the invalidations go to trk, and the session's own
//     writes push nothing (each script that writes a key reads it last,
//     which tracks it again in the same atomic step);
//   - trk receives the invalidation pushes, and hands each key to the
//     lease that holds it and the Locks that wait for it.
//
// Tracking follows the keys read, not a prefix (BCAST): a lease's key is
// any key, and with BCAST every change of any key under the prefix, by
// any client, would be pushed to every process that holds a lease there,
// a cost that grows with everyone's work instead of this process's; the
// server keeps one entry per key read instead (tracking-table-max-keys,
// 1,000,000 by default; a key evicted from the table is pushed, and read
// again).
//
// The renewer renews every lease due within half its RenewPeriod in one
// pipeline of renewManyScript calls (renewChunk leases each) followed by one
// WAIT; each lease's deadline counts from the send time of the batch that
// renewed it. The checker reads the keys Redis pushed (trackScript, expiryScript) and
// loses each lease whose key is no longer its own; when a connection
// fails, it dials both again, reads every lease's key and wakes every
// waiting Lock. The loss of a connection is not a loss of its leases: only
// their deadlines run.
type session struct {
	rdb   *redis.Client
	ep    *endpoint
	bound time.Duration // bounds a dial, a write, a read after a push

	dialMu sync.Mutex // one dial at a time

	mu      sync.Mutex
	g       *generation // the live connections, nil when none
	refs    int         // Locks in flight and leases held
	idle    time.Time   // when refs last fell to 0
	leases  map[*Lease]struct{}
	holders map[string]*Lease
	waiters map[string]map[chan struct{}]struct{}
	pushed  map[string]struct{} // keys pushed, not yet read
	all     bool                // read every lease's key: a flush, a reconnection
	closed  bool
	checkC  chan struct{} // wakes the checker
	renewC  chan struct{} // wakes the renewer
	done    chan struct{}
	workers sync.WaitGroup
	due     time.Time // when the renewer wakes next, zero while it renews or idles
}

// generation is one pair of a session's connections, dialed together and
// given up together.
type generation struct {
	cmd, trk *conn
	replicas int   // the replicas ROLE listed at the dial
	roleErr  error // why ROLE failed, if it did
	broken   bool
}

// renewChunk is how many leases one renewManyScript call renews, and
// checkChunk how many keys one trackScript call reads: a script blocks
// the server while it runs, and a thousand keys take about a millisecond.
const (
	renewChunk = 1000
	checkChunk = 1000
)

// sessionIdle is how long a session with no lease and no Lock in flight
// keeps its connections before it closes them; idlePoll is how often it
// looks, meanwhile, whether its client was closed.
const (
	sessionIdle = time.Minute
	idlePoll    = 20 * time.Millisecond
)

// sessions is the registry of sessions, one per client.
var sessions struct {
	mu sync.Mutex
	m  map[*redis.Client]*session
}

// join returns the session of rdb, started if there is none, with one more
// reference, which the caller gives back with leave.
func join(rdb *redis.Client, ep *endpoint, bound time.Duration) *session {
	sessions.mu.Lock()
	defer sessions.mu.Unlock()
	s := sessions.m[rdb]
	if s == nil {
		if sessions.m == nil {
			sessions.m = map[*redis.Client]*session{}
		}
		s = &session{
			rdb:     rdb,
			ep:      ep,
			bound:   bound,
			leases:  map[*Lease]struct{}{},
			holders: map[string]*Lease{},
			waiters: map[string]map[chan struct{}]struct{}{},
			pushed:  map[string]struct{}{},
			checkC:  make(chan struct{}, 1),
			renewC:  make(chan struct{}, 1),
			done:    make(chan struct{}),
		}
		// The reference is taken before the renewer starts: it closes a
		// session it finds without one.
		s.refs = 1
		sessions.m[rdb] = s
		s.workers.Add(2)
		go s.renewer()
		go s.checker()
		return s
	}
	s.mu.Lock()
	s.refs++
	s.mu.Unlock()
	return s
}

// leave gives back a reference taken by join.
func (s *session) leave() {
	s.mu.Lock()
	s.refs--
	idle := s.refs == 0
	if idle {
		s.idle = time.Now()
	}
	s.mu.Unlock()
	if idle {
		poke(s.renewC) // to look, every idlePoll, whether its client was closed
	}
}

// closeIfIdle closes the session if nothing uses it and its client was
// closed, or it has been idle for sessionIdle. It reports whether it did.
func (s *session) closeIfIdle() bool {
	sessions.mu.Lock()
	s.mu.Lock()
	if s.refs > 0 || !closed(s.rdb) && time.Since(s.idle) < sessionIdle {
		s.mu.Unlock()
		sessions.mu.Unlock()
		return false
	}
	s.closed = true
	delete(sessions.m, s.rdb)
	g := s.g
	s.g = nil
	s.mu.Unlock()
	sessions.mu.Unlock()
	close(s.done)
	if g != nil {
		g.cmd.close()
		g.trk.close()
	}
	return true
}

// poke wakes the goroutine that waits on c, if it is not awake already.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// current returns the live connections, dialed now if there are none.
// dialed reports whether this call dialed them: a failure of a dial that a
// Lock made on its first attempt is a mistake.
func (s *session) current(ctx context.Context) (g *generation, dialed bool, err error) {
	s.mu.Lock()
	g = s.g
	s.mu.Unlock()
	if g != nil {
		return g, false, nil
	}
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	s.mu.Lock()
	g = s.g
	s.mu.Unlock()
	if g != nil {
		return g, false, nil
	}
	g, err = s.dial(ctx)
	if err != nil {
		return nil, true, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		g.cmd.close()
		g.trk.close()
		return nil, true, redis.ErrClosed
	}
	s.g = g
	s.all = true // every key is read again, every waiter woken
	s.mu.Unlock()
	poke(s.checkC)
	return g, true, nil
}

// dial dials a generation: trk, then cmd with its tracking redirected to
// trk, then ROLE.
func (s *session) dial(ctx context.Context) (*generation, error) {
	trk, err := s.ep.dial(ctx, false)
	if err != nil {
		return nil, err
	}
	if trk.role() != "master" {
		trk.close()
		return nil, &serverError{msg: fmt.Sprintf("READONLY the server is not a primary: a replica's address? (HELLO says its role is %s)", trk.role())}
	}
	trk.setOnPush(s.push)
	cmd, err := s.ep.dial(ctx, false)
	if err != nil {
		trk.close()
		return nil, err
	}
	g := &generation{cmd: cmd, trk: trk}
	ctx, cancel := context.WithTimeout(ctx, s.bound)
	defer cancel()
	rs, err := cmd.pipe(ctx,
		[]any{"CLIENT", "TRACKING", "ON", "REDIRECT", strconv.FormatInt(trk.id(), 10), "NOLOOP"},
		[]any{"ROLE"})
	if err == nil && rs[0].err != nil {
		err = fmt.Errorf("CLIENT TRACKING ON: %w", rs[0].err)
	}
	if err != nil {
		cmd.close()
		trk.close()
		return nil, err
	}
	if rs[1].err != nil {
		g.roleErr = fmt.Errorf("ROLE (Config.Replicas does without it, except behind Sentinel): %w", rs[1].err)
	} else if l, _ := rs[1].v.([]any); len(l) >= 3 && l[0] == "master" {
		reps, _ := l[2].([]any)
		g.replicas = len(reps)
	} else {
		cmd.close()
		trk.close()
		return nil, &serverError{msg: fmt.Sprintf("READONLY the server is not a primary: a replica's address? (ROLE says %v)", rs[1].v)}
	}
	return g, nil
}

// drop gives up g, if it is still the live generation: its connections
// are closed, and the checker dials again while leases need them.
func (s *session) drop(g *generation) {
	s.mu.Lock()
	if g.broken {
		s.mu.Unlock()
		return
	}
	g.broken = true
	if s.g == g {
		s.g = nil
	}
	s.mu.Unlock()
	g.cmd.fail(errConnClosed)
	g.trk.fail(errConnClosed)
	poke(s.checkC)
}

// push takes an invalidation from trk's reader: ["invalidate", keys], keys
// nil for a flush of the database.
func (s *session) push(p []any) {
	s.mu.Lock()
	var keys []any
	if len(p) >= 2 {
		keys, _ = p[1].([]any)
	}
	if len(p) < 2 || p[1] == nil {
		s.all = true
		for _, ws := range s.waiters {
			for w := range ws {
				poke(w)
			}
		}
	}
	for _, k := range keys {
		key, _ := k.(string)
		for w := range s.waiters[key] {
			poke(w)
		}
		if _, ok := s.holders[key]; ok {
			s.pushed[key] = struct{}{}
		}
	}
	s.mu.Unlock()
	poke(s.checkC)
}

// wait registers a Lock that waits for key and its claim ckey: the channel
// returned is poked when either is pushed, released by a lease of this
// session, or the connections were dialed again. The func returned
// unregisters it.
func (s *session) wait(key, ckey string) (chan struct{}, func()) {
	w := make(chan struct{}, 1)
	s.mu.Lock()
	for _, k := range []string{key, ckey} {
		if s.waiters[k] == nil {
			s.waiters[k] = map[chan struct{}]struct{}{}
		}
		s.waiters[k][w] = struct{}{}
	}
	s.mu.Unlock()
	return w, func() {
		s.mu.Lock()
		for _, k := range []string{key, ckey} {
			delete(s.waiters[k], w)
			if len(s.waiters[k]) == 0 {
				delete(s.waiters, k)
			}
		}
		s.mu.Unlock()
	}
}

// wake pokes the Locks that wait for key: a release by this session's own
// connection pushes nothing to it (NOLOOP).
func (s *session) wake(key string) {
	s.mu.Lock()
	for w := range s.waiters[key] {
		poke(w)
	}
	s.mu.Unlock()
}

// hold adds a granted lease to the session's renewals and pushes; its
// reference, taken by join, is given back when it is lost or released.
func (s *session) hold(l *Lease) {
	s.mu.Lock()
	s.leases[l] = struct{}{}
	s.holders[l.key] = l
	sooner := s.due.IsZero() || l.next.Before(s.due)
	s.mu.Unlock()
	if sooner {
		// Only a lease due before the renewer's wake moves it: a
		// thousand Locks must not make it look at every lease a
		// thousand times.
		poke(s.renewC)
	}
}

// forget removes l from the session, once, and gives back its reference.
func (s *session) forget(l *Lease) {
	s.mu.Lock()
	if _, ok := s.leases[l]; !ok {
		s.mu.Unlock()
		return
	}
	delete(s.leases, l)
	if s.holders[l.key] == l {
		delete(s.holders, l.key)
	}
	s.mu.Unlock()
	s.leave()
}

// renewer renews the session's leases as they come due, and closes the
// session once it is idle.
func (s *session) renewer() {
	defer s.workers.Done()
	pause := retryPause / 10
	for {
		s.mu.Lock()
		n := len(s.leases)
		var due time.Time
		for l := range s.leases {
			if due.IsZero() || l.next.Before(due) {
				due = l.next
			}
		}
		s.due = due
		s.mu.Unlock()
		wait := time.Until(due)
		if n == 0 {
			if s.closeIfIdle() {
				return
			}
			wait = idlePoll
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-s.done:
				t.Stop()
				return
			case <-s.renewC:
				t.Stop()
				continue
			case <-t.C:
			}
		}
		s.mu.Lock()
		s.due = time.Time{}
		s.mu.Unlock()
		if n == 0 {
			continue
		}
		if s.renew() {
			pause = retryPause / 10
		} else {
			sleepOr(s.done, pause)
			pause = min(2*pause, retryPause)
		}
	}
}

// sleepOr waits d or until done is closed.
func sleepOr(done <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// renew sends one batch: every lease due within half its RenewPeriod. It
// reports whether the connection answered.
func (s *session) renew() bool {
	now := time.Now()
	s.mu.Lock()
	g := s.g
	var batch []*Lease
	var latest time.Time
	need := 0
	for l := range s.leases {
		if l.next.Sub(now) <= l.cfg.RenewPeriod/2 {
			batch = append(batch, l)
			need = max(need, l.need)
		}
	}
	s.mu.Unlock()
	if len(batch) == 0 {
		return true
	}
	if g == nil {
		poke(s.checkC) // the checker dials again
		for _, l := range batch {
			l.renewalFailed(now, errNoConnection)
		}
		return false
	}
	earliest := time.Time{}
	for _, l := range batch {
		at := l.deadline.current()
		if at.After(latest) {
			latest = at
		}
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	var cmds [][]any
	for i := 0; i < len(batch); i += renewChunk {
		part := batch[i:min(i+renewChunk, len(batch))]
		cmd := make([]any, 0, 3+4*len(part))
		cmd = append(cmd, "EVAL", renewManyScript, strconv.Itoa(len(part)))
		for _, l := range part {
			cmd = append(cmd, l.key)
		}
		for _, l := range part {
			cmd = append(cmd, l.ckey, l.value, strconv.FormatInt(l.cfg.TTL.Milliseconds(), 10))
		}
		cmds = append(cmds, cmd)
	}
	if need > 0 {
		wait := max(1, min(batch[0].cfg.RenewPeriod, time.Until(earliest)).Milliseconds())
		cmds = append(cmds, []any{"WAIT", strconv.Itoa(need), strconv.FormatInt(wait, 10)})
	}
	// A batch is abandoned at the latest deadline among its leases: its
	// answer could no longer move any.
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	sent := time.Now() // before the send: never later than Redis runs it
	rs, err := g.cmd.pipe(ctx, cmds...)
	if err != nil {
		s.drop(g)
		for _, l := range batch {
			l.renewalFailed(sent, err)
		}
		return false
	}
	acked, waitErr := int64(0), error(nil)
	if need > 0 {
		w := rs[len(rs)-1]
		acked, _ = w.v.(int64)
		waitErr = w.err
	}
	pause := retryPause
	ok := true
	for c := 0; c*renewChunk < len(batch); c++ {
		part := batch[c*renewChunk : min((c+1)*renewChunk, len(batch))]
		r := rs[c]
		if r.err != nil {
			switch {
			case readOnly(r.err):
				for _, l := range part {
					l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s: %w", ErrFailedOver, clock(sent), r.err))
				}
				s.drop(g) // a role change: learn it again
			case permanent(r.err):
				for _, l := range part {
					l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s: %w", ErrRefused, clock(sent), r.err))
				}
			default:
				// LOADING, BUSY: the same server, later.
				ok = false
				s.mu.Lock()
				for _, l := range part {
					l.next = time.Now().Add(min(pause, l.cfg.RenewPeriod/4))
				}
				s.mu.Unlock()
				for _, l := range part {
					l.renewalFailed(sent, r.err)
				}
			}
			continue
		}
		res, _ := r.v.([]any)
		for i, l := range part {
			var v any
			if i < len(res) {
				v = res[i]
			}
			switch v := v.(type) {
			case string:
				l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s found the key holding %q, not %q", ErrTakenOver, clock(sent), v, l.value))
				continue
			case int64:
				if v == 0 {
					l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s found no key", ErrDeleted, clock(sent)))
					continue
				}
			}
			l.deadline.apply(sent)
			if l.need > 0 {
				if permanent(waitErr) {
					l.loseAnswer(fmt.Errorf("%w: the renewal's WAIT sent at %s: %w", ErrRefused, clock(sent), waitErr))
					continue
				}
				if waitErr != nil || acked < int64(l.need) {
					// Only the primary has it: the replica promoted in
					// its place would expire the key at the last
					// confirmed write's expiry.
					s.mu.Lock()
					l.next = time.Now().Add(min(pause, l.cfg.RenewPeriod/4))
					s.mu.Unlock()
					l.renewalFailed(sent, errUnacked(waitErr, acked, l.need))
					continue
				}
			}
			l.deadline.confirm(sent)
			s.mu.Lock()
			l.next = sent.Add(l.cfg.RenewPeriod)
			s.mu.Unlock()
		}
	}
	return ok
}

// checker reads the keys Redis pushed, dials the connections again when
// they failed and leases need them, and wakes the waiting Locks after a
// reconnection.
func (s *session) checker() {
	defer s.workers.Done()
	pause := retryPause / 10
	for {
		s.mu.Lock()
		g := s.g
		s.mu.Unlock()
		var cmdDead, trkDead <-chan struct{}
		if g != nil {
			cmdDead, trkDead = g.cmd.dead, g.trk.dead
		}
		select {
		case <-s.done:
			return
		case <-s.checkC:
		case <-cmdDead:
			s.drop(g)
		case <-trkDead:
			s.drop(g)
		}
		for {
			s.mu.Lock()
			g, live, waiting := s.g, len(s.leases), len(s.waiters)
			s.mu.Unlock()
			if g != nil || live == 0 && waiting == 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.bound)
			_, _, err := s.current(ctx)
			cancel()
			if err == nil {
				pause = retryPause / 10
				break
			}
			if permanent(err) || readOnly(err) {
				s.loseAll(err)
				break
			}
			sleepOr(s.done, pause)
			pause = min(2*pause, retryPause)
			select {
			case <-s.done:
				return
			default:
			}
		}
		s.check()
	}
}

// loseAll loses every lease of the session: a reconnection reached a
// replica, or the server refuses for good what the session needs.
func (s *session) loseAll(err error) {
	s.mu.Lock()
	ls := make([]*Lease, 0, len(s.leases))
	for l := range s.leases {
		ls = append(ls, l)
	}
	for _, ws := range s.waiters {
		for w := range ws {
			poke(w)
		}
	}
	s.mu.Unlock()
	cause := ErrRefused
	if readOnly(err) {
		cause = ErrFailedOver
	}
	for _, l := range ls {
		l.lose(fmt.Errorf("%w: a reconnection to the server: %w", cause, err))
	}
}

// check reads the keys pushed, or every lease's key after a flush or a
// reconnection, and loses each lease whose key is no longer its own.
func (s *session) check() {
	s.mu.Lock()
	g := s.g
	if g == nil {
		s.mu.Unlock()
		return
	}
	all := s.all
	what := "an invalidation of the key"
	var ls []*Lease
	if all {
		s.all = false
		what = "an invalidation of every key (FLUSHALL or FLUSHDB), or a reconnection to " + g.cmd.addr()
		for l := range s.leases {
			ls = append(ls, l)
		}
		for _, ws := range s.waiters {
			for w := range ws {
				poke(w)
			}
		}
	} else {
		for k := range s.pushed {
			if l := s.holders[k]; l != nil {
				ls = append(ls, l)
			}
		}
	}
	clear(s.pushed)
	s.mu.Unlock()
	if len(ls) == 0 {
		return
	}
	var cmds [][]any
	for i := 0; i < len(ls); i += checkChunk {
		part := ls[i:min(i+checkChunk, len(ls))]
		track := make([]any, 0, 3+len(part))
		track = append(track, "EVAL", trackScript, strconv.Itoa(len(part)))
		expiry := make([]any, 0, 3+len(part))
		expiry = append(expiry, "EVAL", expiryScript, "0")
		for _, l := range part {
			track = append(track, l.key)
			expiry = append(expiry, l.key)
		}
		cmds = append(cmds, track, expiry)
	}
	applied := make([]time.Time, len(ls))
	latest := time.Now().Add(s.bound)
	for i, l := range ls {
		applied[i] = l.deadline.lastApplied()
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	sent := time.Now()
	rs, err := g.cmd.pipe(ctx, cmds...)
	answered := time.Now()
	if err != nil {
		s.drop(g)
		return
	}
	for c := 0; 2*c < len(rs); c++ {
		part := ls[c*checkChunk : min((c+1)*checkChunk, len(ls))]
		vs, _ := rs[2*c].v.([]any)
		ttls, _ := rs[2*c+1].v.([]any)
		if rs[2*c].err != nil || rs[2*c+1].err != nil || len(vs) != len(part) || len(ttls) != len(part) {
			// Read again on a new connection: the deadline covers the
			// time the keys go unread.
			s.drop(g)
			return
		}
		for i, l := range part {
			l.checked(vs[i], ttls[i], what, all, sent, answered, applied[c*checkChunk+i])
		}
	}
}

// checked loses l if the read of its key, sent at sent and answered at
// answered, found it no longer l's: gone, another value, or an expiry
// before the deadline (the deadline is then brought forward).
func (l *Lease) checked(v, pttl any, what string, all bool, sent, answered, applied time.Time) {
	switch v := v.(type) {
	case string:
		if v != l.value {
			l.lose(fmt.Errorf("%w: the read after %s found the key holding %q, not %q", ErrTakenOver, what, v, l.value))
			return
		}
	default:
		how := "found no key"
		if all {
			how = "found no key: the database was flushed, or the server lost it"
		}
		l.lose(fmt.Errorf("%w: the read after %s %s", ErrDeleted, what, how))
		return
	}
	// As in check: an expiry sooner than the lease's own writes set was
	// set by another client.
	ms, _ := pttl.(int64)
	if ms >= 0 && answered.Add(time.Duration(ms)*time.Millisecond+l.cfg.Margin/4).Before(applied.Add(l.cfg.TTL)) {
		expires := sent.Add(time.Duration(ms) * time.Millisecond)
		l.deadline.shorten(expires, fmt.Errorf("%w: the read after %s, sent at %s, found the key expiring in %d ms, at %s, before the deadline less the margin %v",
			ErrExpired, what, clock(sent), ms, clock(expires), l.cfg.Margin))
	}
}
