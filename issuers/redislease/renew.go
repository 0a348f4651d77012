package redislease

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

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
	parts := s.split(batch, renewChunk)
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
	for _, p := range parts {
		if p.asking {
			cmds = append(cmds, []any{"ASKING"})
		}
		cmd := make([]any, 0, 3+4*len(p.ls))
		cmd = append(cmd, "EVAL", renewManyScript, strconv.Itoa(len(p.ls)))
		for _, l := range p.ls {
			cmd = append(cmd, l.key)
		}
		for _, l := range p.ls {
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
	addr := g.cmd.addr()
	acked, waitErr := int64(0), error(nil)
	if need > 0 {
		w := rs[len(rs)-1]
		acked, _ = w.v.(int64)
		waitErr = w.err
	}
	pause := retryPause
	ok := true
	i := 0
	for _, p := range parts {
		if p.asking {
			i++ // ASKING's OK
		}
		r := rs[i]
		i++
		if r.err != nil {
			switch {
			case s.moved(p.ls, r.err):
				// A Cluster slot moved, or is moving: its leases go to
				// the node named, which reads their keys at once.
			case readOnly(r.err):
				for _, l := range p.ls {
					l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s: %w", ErrFailedOver, clock(sent), r.err))
				}
				s.drop(g) // a role change: learn it again
			case permanent(r.err):
				for _, l := range p.ls {
					l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s: %w", ErrRefused, clock(sent), r.err))
				}
			default:
				// LOADING, BUSY, TRYAGAIN: the same server, later.
				ok = false
				s.mu.Lock()
				for _, l := range p.ls {
					l.next = time.Now().Add(min(pause, l.cfg.RenewPeriod/4))
				}
				s.mu.Unlock()
				for _, l := range p.ls {
					l.renewalFailed(sent, r.err)
				}
			}
			continue
		}
		res, _ := r.v.([]any)
		for i, l := range p.ls {
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
			if *l.server.Load() != addr {
				l.setServer(addr)
			}
			s.mu.Lock()
			l.next = sent.Add(l.cfg.RenewPeriod)
			s.mu.Unlock()
		}
	}
	return ok
}

// part is the leases one script call covers: at most a chunk, and on a
// Cluster node the leases of one slot, behind ASKING while it migrates.
type part struct {
	ls     []*Lease
	asking bool
}

// split cuts ls into parts of at most chunk leases. On a Cluster node a
// script's keys must share a slot, so each slot's leases go in parts of
// their own. s.mu is held.
func (s *session) split(ls []*Lease, chunk int) []part {
	var parts []part
	if s.key.node == "" {
		for i := 0; i < len(ls); i += chunk {
			parts = append(parts, part{ls: ls[i:min(i+chunk, len(ls))]})
		}
		return parts
	}
	type group struct {
		slot   int
		asking bool
	}
	at := map[group]int{} // the index in parts of the group's last part
	for _, l := range ls {
		k := group{slotOf(l.key), l.asking}
		i, ok := at[k]
		if !ok || len(parts[i].ls) == chunk {
			i = len(parts)
			at[k] = i
			parts = append(parts, part{asking: l.asking})
		}
		parts[i].ls = append(parts[i].ls, l)
	}
	return parts
}

// moved moves ls to the Cluster node that err, a MOVED or ASK answer,
// names, and reports whether it did.
func (s *session) moved(ls []*Lease, err error) bool {
	if s.key.node == "" {
		return false
	}
	addr, ok := redirected(err, "MOVED")
	asking := false
	if !ok {
		if addr, ok = redirected(err, "ASK"); !ok {
			return false
		}
		asking = true
	}
	for _, l := range ls {
		l.move(addr, asking)
	}
	return true
}
