package pglease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// idleLinger is how many heartbeats a shared session with no lease lasts
// before it closes: a process that locks and unlocks in turn keeps its
// session, and one that stopped locking gives it back.
const idleLinger = 5

// setKey names the shared sessions of one pool and the parts of a Config
// that a session's settings and heartbeats depend on.
type setKey struct {
	pool          *pgxpool.Pool
	heartbeat     time.Duration
	deadline      time.Duration
	serverTimeout time.Duration
	sessionPooler bool
	sessions      int
}

// The sets of shared sessions, by pool and Config. A set is removed once
// it has no session and no Lock uses it.
var sets = struct {
	sync.Mutex
	m map[setKey]*sessionSet
}{m: make(map[setKey]*sessionSet)}

// A sessionSet is the shared sessions of one pool and Config, at most
// cfg.Sessions, and the Locks waiting in the process for a lock that they
// could not take.
type sessionSet struct {
	key  setKey
	pool *pgxpool.Pool
	cfg  Config // the durations, SessionPooler and Sessions of key

	mu       sync.Mutex
	sessions []*shared
	opening  int           // sessions being opened
	opened   chan struct{} // closed when an opening ends; then replaced
	waiters  int           // Locks that use the set without a session
	removed  bool
	watchers map[int64]map[chan struct{}]struct{}
}

// setFor returns the set of pool and c, and counts the caller as its
// user until done.
func setFor(pool *pgxpool.Pool, c Config) *sessionSet {
	k := setKey{pool, c.Heartbeat, c.Deadline, c.ServerTimeout, c.SessionPooler, c.Sessions}
	sets.Lock()
	defer sets.Unlock()
	st := sets.m[k]
	if st == nil {
		cfg := Config{Heartbeat: c.Heartbeat, Deadline: c.Deadline, ServerTimeout: c.ServerTimeout, SessionPooler: c.SessionPooler, Sessions: c.Sessions}
		st = &sessionSet{key: k, pool: pool, cfg: cfg, opened: make(chan struct{}), watchers: make(map[int64]map[chan struct{}]struct{})}
		sets.m[k] = st
	}
	st.mu.Lock()
	st.waiters++
	st.mu.Unlock()
	return st
}

// done ends a use of setFor.
func (st *sessionSet) done() {
	st.mu.Lock()
	st.waiters--
	st.mu.Unlock()
	st.removeIfUnused()
}

// removeIfUnused removes the set from sets once it has no session, no
// opening and no user, so that a closed pool is not kept.
func (st *sessionSet) removeIfUnused() {
	sets.Lock()
	defer sets.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.removed || len(st.sessions) > 0 || st.opening > 0 || st.waiters > 0 {
		return
	}
	st.removed = true
	if sets.m[st.key] == st {
		delete(sets.m, st.key)
	}
}

// use returns a session of the set for a Lock of key, counted as one more
// user: the least used one, unless every session holds leasesPerSession
// leases and fewer than cfg.Sessions are open, or none is; then it opens
// one, with c's checks. It waits for a session being opened rather than
// open another.
func (st *sessionSet) use(ctx context.Context, c Config, key int64) (*shared, error) {
	for {
		st.mu.Lock()
		var best *shared
		for _, sh := range st.sessions {
			if best == nil || sh.users < best.users {
				best = sh
			}
		}
		room := len(st.sessions)+st.opening < st.cfg.Sessions
		if best != nil && (best.users < leasesPerSession || !room) {
			best.users++
			st.mu.Unlock()
			return best, nil
		}
		if !room || st.opening > 0 {
			// One session opens at a time: the Locks that come meanwhile
			// wait for it rather than open one each.
			opened := st.opened
			st.mu.Unlock()
			select {
			case <-opened:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("wait for a shared session being opened: %w", context.Cause(ctx))
			}
		}
		st.opening++
		st.mu.Unlock()
		sh, err := st.open(ctx, c, key)
		st.mu.Lock()
		st.opening--
		close(st.opened)
		st.opened = make(chan struct{})
		if err == nil {
			sh.users = 1
			st.sessions = append(st.sessions, sh)
		}
		st.mu.Unlock()
		return sh, err
	}
}

// open opens a shared session: a connection taken out of the pool for
// good, checked (pooler, standby, a lock already held), probed if it goes
// through a pooler in session mode, set (timeouts, mark) and listening on
// notifyChannel. key is the first Lock's, whose lock the connection must
// not hold already.
func (st *sessionSet) open(ctx context.Context, c Config, key int64) (*shared, error) {
	if err := step(ctx, stepAcquire); err != nil {
		return nil, err
	}
	pconn, err := acquire(ctx, st.pool)
	if err != nil {
		return nil, err
	}
	s := newSession(pconn.Hijack(), c.Deadline)
	fail := func(err error) (*shared, error) {
		s.close()
		return nil, err
	}
	if err := step(ctx, stepCheck); err != nil {
		return fail(err)
	}
	id, pooled, err := s.check(ctx, c, key)
	if err != nil {
		return fail(err)
	}
	row, err := s.query(ctx, "select exists (select from pg_catalog.pg_locks where locktype operator(pg_catalog.=) 'advisory' "+
		"and pid operator(pg_catalog.=) pg_catalog.pg_backend_pid()), pg_catalog.pg_backend_pid() where "+s.ours())
	if err != nil {
		return fail(fmt.Errorf("read the session's locks: %w", err))
	}
	if string(row[0]) == "t" {
		return fail(errors.New("the pool's connection holds advisory locks that other code took and gave back with it; a shared session would share them"))
	}
	if pooled {
		if err := step(ctx, stepProbe); err != nil {
			return fail(err)
		}
		if err := s.probe(ctx, st.pool); err != nil {
			return fail(err)
		}
	}
	if err := step(ctx, stepSettings); err != nil {
		return fail(err)
	}
	sent := time.Now()
	if err := s.set(ctx, c, true); err != nil {
		return fail(err)
	}
	if _, err := s.pc.Exec(ctx, "listen "+notifyChannel+"; "+prepareCycleSQL(s.ours())).ReadAll(); err != nil {
		return fail(fmt.Errorf("listen for releases and prepare the lock cycle's statements: %w", err))
	}
	return newShared(st, s, id, sent), nil
}

// leave ends a use of a session by a Lock that made no lease on it, or by
// an Unlock, and removes l from its leases if l is not nil.
func (st *sessionSet) leave(sh *shared, l *Lease) {
	st.mu.Lock()
	sh.users--
	if l != nil {
		delete(sh.leases, l)
	}
	if sh.users == 0 {
		sh.idle = time.Now()
	}
	st.mu.Unlock()
}

// join records l as a lease of sh, and reports false if sh has ended, in
// which case the lock is gone with it.
func (st *sessionSet) join(sh *shared, l *Lease) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if sh.dropped {
		return false
	}
	sh.leases[l] = struct{}{}
	return true
}

// drop removes an ended session from the set and returns its leases.
func (st *sessionSet) drop(sh *shared) []*Lease {
	st.mu.Lock()
	sh.dropped = true
	for i, x := range st.sessions {
		if x == sh {
			st.sessions = append(st.sessions[:i], st.sessions[i+1:]...)
			break
		}
	}
	leases := make([]*Lease, 0, len(sh.leases))
	for l := range sh.leases {
		leases = append(leases, l)
	}
	clear(sh.leases)
	st.mu.Unlock()
	st.removeIfUnused()
	return leases
}

// retire reports whether sh has had no user for idleLinger heartbeats, and
// if so removes it from the set, so that no Lock takes it as it closes.
func (st *sessionSet) retire(sh *shared) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if sh.users > 0 || sh.idle.IsZero() || time.Since(sh.idle) < idleLinger*st.cfg.Heartbeat {
		return false
	}
	sh.dropped = true
	for i, x := range st.sessions {
		if x == sh {
			st.sessions = append(st.sessions[:i], st.sessions[i+1:]...)
			break
		}
	}
	return true
}

// watch returns a channel that receives when a release of key is heard, until
// unwatch.
func (st *sessionSet) watch(key int64) chan struct{} {
	ch := make(chan struct{}, 1)
	st.mu.Lock()
	m := st.watchers[key]
	if m == nil {
		m = make(map[chan struct{}]struct{})
		st.watchers[key] = m
	}
	m[ch] = struct{}{}
	st.mu.Unlock()
	return ch
}

func (st *sessionSet) unwatch(key int64, ch chan struct{}) {
	st.mu.Lock()
	if m := st.watchers[key]; m != nil {
		delete(m, ch)
		if len(m) == 0 {
			delete(st.watchers, key)
		}
	}
	st.mu.Unlock()
}

// wake wakes the Locks waiting for key.
func (st *sessionSet) wake(key int64) {
	st.mu.Lock()
	for ch := range st.watchers[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	st.mu.Unlock()
}

// closeIdle ends every shared session that no lease or Lock uses, at once.
func closeIdle() {
	sets.Lock()
	all := make([]*sessionSet, 0, len(sets.m))
	for _, st := range sets.m {
		all = append(all, st)
	}
	sets.Unlock()
	for _, st := range all {
		st.mu.Lock()
		var idle []*shared
		for _, sh := range st.sessions {
			if sh.users == 0 {
				idle = append(idle, sh)
			}
		}
		st.mu.Unlock()
		for _, sh := range idle {
			sh.fail(errRetired)
			<-sh.done
			<-sh.kept
		}
	}
}

// sessionCount returns how many shared sessions are open, and how many
// leases they hold.
func sessionCount() (sessions, leases int) {
	sets.Lock()
	defer sets.Unlock()
	for _, st := range sets.m {
		st.mu.Lock()
		sessions += len(st.sessions)
		for _, sh := range st.sessions {
			leases += len(sh.leases)
		}
		st.mu.Unlock()
	}
	return sessions, leases
}
