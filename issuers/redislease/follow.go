package redislease

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

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
			if s.key.node != "" && !permanent(err) {
				// A Cluster node that failed or turned replica: its
				// slots' leases go where the Cluster's map says.
				s.rehome()
			} else if permanent(err) || readOnly(err) {
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
	parts := s.split(ls, checkChunk)
	s.mu.Unlock()
	if len(ls) == 0 {
		return
	}
	var cmds [][]any
	for _, p := range parts {
		track := make([]any, 0, 3+len(p.ls))
		track = append(track, "EVAL", trackScript, strconv.Itoa(len(p.ls)))
		expiry := make([]any, 0, 3+len(p.ls))
		expiry = append(expiry, "EVAL", expiryScript, "0")
		for _, l := range p.ls {
			track = append(track, l.key)
			expiry = append(expiry, l.key)
		}
		if p.asking {
			cmds = append(cmds, []any{"ASKING"}, track, []any{"ASKING"}, expiry)
		} else {
			cmds = append(cmds, track, expiry)
		}
	}
	applied := make(map[*Lease]time.Time, len(ls))
	latest := time.Now().Add(s.bound)
	for _, l := range ls {
		applied[l] = l.deadline.lastApplied()
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
	i := 0
	for _, p := range parts {
		if p.asking {
			i++
		}
		tr := rs[i]
		i++
		if p.asking {
			i++
		}
		ex := rs[i]
		i++
		if s.moved(p.ls, tr.err) {
			continue
		}
		if s.key.node != "" && (isServerError(tr.err) || isServerError(ex.err)) {
			// TRYAGAIN, CLUSTERDOWN: the slot is moving or the Cluster
			// is failing over. The keys are read again at the next push
			// or reconnection; their renewals read them meanwhile.
			s.mu.Lock()
			for _, l := range p.ls {
				s.pushed[l.key] = struct{}{}
			}
			s.mu.Unlock()
			continue
		}
		vs, _ := tr.v.([]any)
		ttls, _ := ex.v.([]any)
		if tr.err != nil || ex.err != nil || len(vs) != len(p.ls) || len(ttls) != len(p.ls) {
			// Read again on a new connection: the deadline covers the
			// time the keys go unread.
			s.drop(g)
			return
		}
		for j, l := range p.ls {
			l.checked(vs[j], ttls[j], what, g.cmd.addr(), all, sent, answered, applied[l])
		}
	}
}

// checked loses l if the read of its key, sent at sent and answered at
// answered, found it no longer l's: gone, another value, or an expiry
// before the deadline (the deadline is then brought forward).
func (l *Lease) checked(v, pttl any, what, addr string, all bool, sent, answered, applied time.Time) {
	switch v := v.(type) {
	case string:
		if v != l.value {
			l.lose(fmt.Errorf("%w: the read after %s found the key holding %q, not %q", ErrTakenOver, what, v, l.value))
			return
		}
	default:
		cause, how := ErrDeleted, "found no key"
		switch was := *l.server.Load(); {
		case addr != was:
			// Behind Sentinel, a reconnection reached another primary,
			// which never had the key.
			cause, how = ErrFailedOver, fmt.Sprintf("found no key on %s, which is not the server it was last confirmed on, %s", addr, was)
		case all:
			how = "found no key: the database was flushed, or the server lost it"
		}
		l.lose(fmt.Errorf("%w: the read after %s %s", cause, what, how))
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

// rehome moves each lease of a Cluster node's session whose slot the
// Cluster's map puts on another node there, and wakes the waiting Locks
// to look again: the node failed, or is not a primary any more.
func (s *session) rehome() {
	if s.key.node == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.bound)
	defer cancel()
	s.ep.cluster.ReloadState(ctx)
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
	for _, l := range ls {
		node, err := s.ep.cluster.MasterForKey(ctx, l.key)
		if err != nil {
			continue
		}
		if addr := node.Options().Addr; addr != s.key.node {
			l.move(addr, false)
		}
	}
}
