package mysqllease

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"time"
)

// leasesPerSession is how many leases a shared session holds before a Lock
// opens another, while the set has fewer than its bound: a session costs
// two server connections, two goroutines and a heartbeat a Heartbeat, and
// a process that holds a few hundred leases needs no more than one.
var leasesPerSession = 1000

// A sessionSet is the shared sessions of the leases of one *sql.DB with one
// timing (ServerTimeout, Heartbeat, Margin, Sessions): a Lock of a free
// subject takes its lock on the least loaded one, and opens a new one only
// when every one holds leasesPerSession leases and the set has fewer than
// its bound. A Lock that had to wait joins the set with the session its
// wait was granted on, since the lock belongs to that session.
type sessionSet struct {
	key   setKey
	db    *sql.DB
	cfg   Config
	alone bool // Config.Alone: one lease, one session, closed at its end

	mu      sync.Mutex
	members []*shared
	opening chan struct{} // closed when the session being opened is ready or failed
	refs    int           // Locks in progress on the set; sets.mu guards it
	waiting int           // sessions of waits open, at most Config.Waiters (see waitOwn)
	polled  []*pollWaiter // the Locks that wait by polling (see waitPolled)
	poll    *poller       // the goroutine that polls for them, nil if none
}

// setKey names a set: its pool and the Config's timing.
type setKey struct {
	db                               *sql.DB
	serverTimeout, heartbeat, margin time.Duration
	sessions, waiters                int
}

// The sets of this process, by pool and timing. A set leaves the map once
// it has no session and no Lock in progress.
var sets = struct {
	sync.Mutex
	m map[setKey]*sessionSet
}{m: make(map[setKey]*sessionSet)}

// setFor returns the set of db and c (which has its defaults), counting the
// caller's Lock in progress until it calls done.
func setFor(db *sql.DB, c Config) *sessionSet {
	if c.Alone {
		return &sessionSet{db: db, cfg: c, alone: true, refs: 1}
	}
	key := setKey{db, c.ServerTimeout, c.Heartbeat, c.Margin, c.Sessions, c.Waiters}
	sets.Lock()
	defer sets.Unlock()
	st := sets.m[key]
	if st == nil {
		st = &sessionSet{key: key, db: db, cfg: c}
		sets.m[key] = st
	}
	st.refs++
	return st
}

// done ends the count of a Lock in progress.
func (st *sessionSet) done() {
	if st.alone {
		return
	}
	sets.Lock()
	defer sets.Unlock()
	st.refs--
	st.forget()
}

// forget removes the set from the map when nothing uses it; sets.mu is
// held.
func (st *sessionSet) forget() {
	st.mu.Lock()
	empty := len(st.members) == 0 && st.opening == nil
	st.mu.Unlock()
	if empty && st.refs == 0 && sets.m[st.key] == st {
		delete(sets.m, st.key)
	}
}

// remove removes an ended session from the set.
func (st *sessionSet) remove(m *shared) {
	if !st.alone {
		sets.Lock()
		defer sets.Unlock()
	}
	st.mu.Lock()
	st.members = slices.DeleteFunc(st.members, func(x *shared) bool { return x == m })
	st.mu.Unlock()
	if !st.alone {
		st.forget()
	}
}

// add adds a session, whose one pending Lock is counted, to the set: a
// wait's session, which pick leaves to its lease.
func (st *sessionSet) add(m *shared) {
	st.mu.Lock()
	st.members = append(st.members, m)
	st.mu.Unlock()
}

// bound is the most sessions the set opens for Locks of free subjects:
// Config.Sessions, and no more than a pool's MaxOpenConns leaves room for
// (each takes two connections out of it, and the caller needs one).
func (st *sessionSet) bound() int {
	if st.alone {
		return 1
	}
	n := st.cfg.Sessions
	if open := st.db.Stats().MaxOpenConnections; open > 0 {
		n = min(n, max(1, (open-1)/2))
	}
	return n
}

// pick returns a live session of the set with the caller counted as a
// pending Lock on it, opening one when the set needs it (see sessionSet).
// name is the lock the caller takes: a session opened for it is checked for
// holding it already, as Lock's refusal of ErrHeld says.
func (st *sessionSet) pick(ctx context.Context, c Config, name string) (*shared, error) {
	for {
		st.mu.Lock()
		var best *shared
		bestLoad, shared := 0, 0
		for _, m := range st.members {
			if m.waited {
				// A wait's session holds its one lease, and closes
				// with it, giving its place back to the next wait.
				continue
			}
			shared++
			m.mu.Lock()
			if !m.dead && (best == nil || m.load() < bestLoad) {
				best, bestLoad = m, m.load()
			}
			m.mu.Unlock()
		}
		full := best == nil || (bestLoad >= leasesPerSession && shared < st.bound())
		if st.alone {
			full = best == nil
		}
		if best != nil && (!full || st.opening != nil) {
			best.mu.Lock()
			if best.dead {
				best.mu.Unlock()
				st.mu.Unlock()
				continue
			}
			best.pending++
			best.mu.Unlock()
			st.mu.Unlock()
			return best, nil
		}
		if wait := st.opening; wait != nil {
			st.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		opening := make(chan struct{})
		st.opening = opening
		st.mu.Unlock()
		m, err := st.open(ctx, c, name)
		st.mu.Lock()
		if err == nil {
			st.members = append(st.members, m)
		}
		st.opening = nil
		close(opening)
		st.mu.Unlock()
		return m, err
	}
}

// open opens a shared session: a connection of the pool taken for good,
// the per-session checks (the server, a pooler, the session's timeouts)
// once, the watch lock and its watcher, the heartbeat.
func (st *sessionSet) open(ctx context.Context, c Config, name string) (*shared, error) {
	s, err := st.session(ctx, c, name)
	if err != nil {
		return nil, err
	}
	m, err := newShared(ctx, st, s, false)
	if err != nil {
		s.abandon()
		return nil, err
	}
	return m, nil
}

// session takes a connection of the pool with backoff, and runs the checks
// and settings of a session: a refusal gives it back to the pool untouched
// (it may be another user's, through a pooler, or hold that user's lock); a
// later failure kills and closes it.
func (st *sessionSet) session(ctx context.Context, c Config, name string) (*session, error) {
	conn, err := connect(ctx, st.db)
	if err != nil {
		return nil, err
	}
	s := &session{db: st.db, conn: conn, grace: min(c.Margin, 2*time.Second), bound: c.deadline()}
	if err := s.check(ctx, name); err != nil {
		s.conn.Close()
		return nil, err
	}
	if err := s.probe(ctx); err != nil {
		s.conn.Close()
		return nil, err
	}
	if err := s.set(ctx, c); err != nil {
		s.abandon()
		return nil, err
	}
	if c.Fence != "" {
		table, _ := fenceTable(c.Fence)
		if err := s.checkFence(ctx, table, name); err != nil {
			s.abandon()
			return nil, err
		}
	}
	return s, nil
}
