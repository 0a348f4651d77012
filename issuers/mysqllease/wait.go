package mysqllease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/zukhruf/lease/controller"
)

// The polling of the Locks that wait beyond [Config.Waiters]: one statement
// on a shared session tries every lock they wait for, firstPoll after a
// grant, doubling to maxPoll while nothing is granted, each interval
// jittered down by up to a half. At maxPoll a release is seen about 20 ms
// later on average, and a set with Locks waiting sends at most one poll
// statement each 25 ms however many they are (pollBatch locks a statement).
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 50 * time.Millisecond
	pollBatch = 250
)

// wait takes the lock name, held elsewhere, for a Lock: on a session of
// waits of the set while it has one free or room for one more
// (Config.Waiters), and by polling on a shared session otherwise; with
// Config.Alone, on the lease's own session. holder is the lock's holder
// that the Lock saw, 0 if none.
func (st *sessionSet) wait(ctx context.Context, c Config, subject, name, table string, holder int64) (*Lease, error) {
	if st.alone {
		return st.waitOwn(ctx, c, subject, name, table, holder)
	}
	m, err := st.waitSession(ctx, c, name)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return st.waitPolled(ctx, c, subject, name, table, holder)
	}
	return st.waitOn(ctx, m, c, subject, name, table, holder)
}

// waitSession returns a session of waits of the set with the caller
// counted as a pending Lock on it: an idle one, or one it opens while the
// set has fewer than Config.Waiters and the pool's MaxOpenConns leaves room
// (each session takes two connections). It returns nil when there is none
// to take, or when the server's whole-second GET_LOCK steps (MySQL's) would
// not fit in a quarter of the deadline.
func (st *sessionSet) waitSession(ctx context.Context, c Config, name string) (*shared, error) {
	st.mu.Lock()
	n := 0
	for _, m := range st.members {
		m.mu.Lock()
		if m.waited && !m.dead && m.load() == 0 {
			m.pending++
			m.mu.Unlock()
			st.mu.Unlock()
			return m, nil
		}
		m.mu.Unlock()
		n++
	}
	room := st.waiting < c.Waiters
	if open := st.db.Stats().MaxOpenConnections; open > 0 {
		room = room && n+1 <= (open-1)/2
	}
	if !room {
		st.mu.Unlock()
		return nil, nil
	}
	st.waiting++
	st.mu.Unlock()
	s, err := st.session(ctx, c, name)
	if err != nil {
		st.releaseSlot()
		return nil, err
	}
	if waitStep(c, s.mariadb) == 0 {
		s.abandon()
		st.releaseSlot()
		return nil, nil
	}
	m, err := newShared(ctx, st, s, true)
	if err != nil {
		s.abandon()
		st.releaseSlot()
		return nil, err
	}
	st.add(m)
	return m, nil
}

// waitStep is how long one GET_LOCK of a session of waits blocks: a
// Heartbeat, and at most a quarter of the deadline, so that a step and the
// statement before it are confirmed within the deadline. MySQL reads
// GET_LOCK's timeout as whole seconds: there, 0 when 1 s does not fit.
func waitStep(c Config, mariadb bool) time.Duration {
	step := min(c.Heartbeat, c.deadline()/4)
	if !mariadb {
		step = (step + time.Second - 1) / time.Second * time.Second
		if step > c.deadline()/4 {
			return 0
		}
	}
	return step
}

// releaseSlot gives back a session of waits' place, when it failed to open
// or ended.
func (st *sessionSet) releaseSlot() {
	if st.alone {
		return
	}
	st.mu.Lock()
	st.waiting--
	st.mu.Unlock()
}

// waitOn takes the lock name on m, a session of waits on which the caller
// is counted pending: first GET_LOCK(name, 0), then GET_LOCK(name, step)
// until the server grants it. A blocked step holds no other lease's
// heartbeat, since m holds none; it confirms m itself. When ctx ends during
// a step, m is killed (KILL CONNECTION through another connection of the
// pool), so that the Lock returns at once and no waiter is left on the
// server. Once granted, the previous holder knows and no lease of this
// process holds the lock, the lease is attached to m, which then holds it
// alone, and closes when it is released, or serves the next wait.
func (st *sessionSet) waitOn(ctx context.Context, m *shared, c Config, subject, name, table string, holder int64) (*Lease, error) {
	got, h, err := m.take(name)
	if err != nil {
		m.giveUp()
		return nil, err
	}
	if h != 0 {
		holder = h
	}
	step := waitStep(c, m.s.mariadb)
	q := "SELECT GET_LOCK(" + literal(name) + ", " + seconds(step) + "), IS_USED_LOCK(" + literal(name) + ")" + tail
	for !got {
		var res, now sql.NullInt64
		cut := context.AfterFunc(ctx, func() {
			kctx, cancel := context.WithTimeout(context.Background(), m.s.grace)
			m.s.kill(kctx, "CONNECTION")
			cancel()
		})
		err := m.doFor(step+c.deadline()/2, q, &res, &now)
		if !cut() || ctx.Err() != nil {
			m.fail(fmt.Errorf("%w: the wait was cut by its context", ErrKilled))
			m.giveUp()
			// The server ends a killed or closed session a moment after
			// its client sees the end, and a release in that moment can
			// still grant the dying session the lock. The Lock returns
			// once the session is gone, so that a lock it leaves behind
			// is free for the next caller.
			m.s.awaitGone()
			return nil, fmt.Errorf("the wait was cut by its context: %w", context.Cause(ctx))
		}
		switch {
		case err != nil:
			m.giveUp()
			return nil, fmt.Errorf("wait: %w", causeOf(err))
		case !res.Valid:
			m.giveUp()
			return nil, fmt.Errorf("wait: %w: GET_LOCK returned NULL: the server interrupted it", ErrKilled)
		}
		got = res.Int64 == 1
		if !got && now.Valid {
			holder = now.Int64
		}
	}
	if err := graceFor(ctx, c, st.holderID(m.s.server, holder), func(q string, n *int64) error { return m.do(q, n) }); err != nil {
		m.release(name)
		return nil, err
	}
	unclaim, err := claim(ctx, st.lockID(m.s.server, name))
	if err != nil {
		m.release(name)
		return nil, fmt.Errorf("the wait was cut by its context while another lease of this process held the lock: %w", err)
	}
	return st.grant(m, c, subject, name, table, unclaim)
}

// waitOwn takes the lock name for a lease of Config.Alone on a session of
// its own, opened and checked as a shared session is, with GET_LOCK in
// steps of Heartbeat. Once the server grants the lock, its previous holder
// knows, and no lease of this process holds it any more, the session
// becomes the lease's.
func (st *sessionSet) waitOwn(ctx context.Context, c Config, subject, name, table string, holder int64) (*Lease, error) {
	s, err := st.session(ctx, c, name)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Lease, error) {
		s.abandon()
		return nil, err
	}
	holder, err = s.wait(ctx, name, c.Heartbeat, c.deadline(), holder)
	if err != nil {
		return fail(err)
	}
	if err := graceFor(ctx, c, st.holderID(s.server, holder), func(q string, alive *int64) error { return s.row(ctx, q, alive) }); err != nil {
		return fail(err)
	}
	unclaim, err := claim(ctx, st.lockID(s.server, name))
	if err != nil {
		return fail(fmt.Errorf("the wait was cut by its context while another lease of this process held the lock: %w", err))
	}
	var token int64
	if table != "" {
		if token, err = s.fence(ctx, table, name); err != nil {
			unclaim()
			return fail(err)
		}
	}
	m, err := newShared(ctx, st, s, false)
	if err != nil {
		unclaim()
		return fail(err)
	}
	st.add(m)
	l := &Lease{ctrl: controller.New(subject), m: m, name: name, token: token, unclaim: unclaim, obs: c.Observer}
	if !m.attach(l) {
		unclaim()
		return nil, fmt.Errorf("%w: the session ended as the lock was granted", ErrConnLost)
	}
	return l, nil
}

// holderID returns the name of the session id of server, the previous
// holder of a lock, among this process's.
func (st *sessionSet) holderID(server string, id int64) sessionID {
	return sessionID{server: server, id: id, proc: st.lockID(server, "").proc}
}

// graceFor waits c.Grace when holder, the session that held the lock
// before the caller's grant, has ended or is being killed: the server freed
// its locks before its client could learn of it, which a lease of this
// package does a few milliseconds later by its watcher. A holder still
// alive released the lock (RELEASE_LOCK), and the grant stands at once.
// alive runs a statement of the granted session that counts the holder's
// live sessions. The process list shows only the user's own sessions
// without the PROCESS privilege: another user's holder is taken for ended.
func graceFor(ctx context.Context, c Config, holder sessionID, alive func(q string, n *int64) error) error {
	if holder.id == 0 || isMine(holder) {
		// None seen, or a session of this process, whose leases the
		// registry orders this grant after.
		return nil
	}
	var n int64
	q := "SELECT (SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + strconv.FormatInt(holder.id, 10) + " AND COMMAND <> 'Killed')" + tail
	if err := alive(q, &n); err == nil && n > 0 {
		return nil
	}
	graces.Add(1)
	t := time.NewTimer(c.Grace)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the grace after the previous holder's session ended was cut by its context: %w", context.Cause(ctx))
	}
}

// graces counts the graces waited, for the tests.
var graces atomic.Int64

// A pollWaiter is a Lock that waits by polling.
type pollWaiter struct {
	name   string
	holder int64          // the lock's holder at the last poll, 0 if unknown; the poller's
	got    chan pollGrant // buffered: the grant, or the error that ends the wait
	gone   bool           // granted, failed or left; st.mu guards it
}

// A pollGrant is a poll's outcome for one Lock: the shared session that took
// its lock, with the grant counted as a pending Lock on it, the previous
// holder and the registry's record; or the error that ends the wait.
type pollGrant struct {
	m       *shared
	holder  int64
	unclaim func()
	err     error
}

// A poller is the goroutine that polls for a set's Locks; it ends when the
// set has none.
type poller struct {
	ctx    context.Context // ended when the last Lock leaves: cuts the opening of a session
	cancel context.CancelFunc
}

// waitPolled waits for the lock name by polling: the set's poller tries it,
// with the other locks its Locks wait for, on a shared session; once it is
// taken there, its previous holder knows and the lease is attached. A Lock
// cut by its context leaves nothing on the server.
func (st *sessionSet) waitPolled(ctx context.Context, c Config, subject, name, table string, holder int64) (*Lease, error) {
	w := &pollWaiter{name: name, holder: holder, got: make(chan pollGrant, 1)}
	st.enqueue(w)
	var g pollGrant
	select {
	case g = <-w.got:
	case <-ctx.Done():
		if g, ok := st.dequeue(w); ok {
			g.m.release(name)
			g.unclaim()
		}
		return nil, fmt.Errorf("the wait was cut by its context: %w", context.Cause(ctx))
	}
	if g.err != nil {
		return nil, g.err
	}
	if err := graceFor(ctx, c, st.holderID(g.m.s.server, g.holder), func(q string, n *int64) error { return g.m.do(q, n) }); err != nil {
		g.m.release(name)
		g.unclaim()
		return nil, err
	}
	return st.grant(g.m, c, subject, name, table, g.unclaim)
}

// enqueue adds w to the set's polled Locks, and starts the poller if none
// runs.
func (st *sessionSet) enqueue(w *pollWaiter) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.polled = append(st.polled, w)
	if st.poll == nil {
		p := &poller{}
		p.ctx, p.cancel = context.WithCancel(context.Background())
		st.poll = p
		go st.pollLoop(p)
	}
}

// dequeue removes w, whose Lock leaves, and returns the grant that a poll
// may have made it meanwhile.
func (st *sessionSet) dequeue(w *pollWaiter) (pollGrant, bool) {
	st.mu.Lock()
	if !w.gone {
		w.gone = true
		st.drop(w)
	}
	st.mu.Unlock()
	select {
	case g := <-w.got:
		return g, g.err == nil
	default:
		return pollGrant{}, false
	}
}

// drop removes w from the polled Locks, and stops the poller once none is
// left; st.mu is held.
func (st *sessionSet) drop(w *pollWaiter) {
	st.polled = slices.DeleteFunc(st.polled, func(x *pollWaiter) bool { return x == w })
	if len(st.polled) == 0 && st.poll != nil {
		st.poll.cancel()
		st.poll = nil
	}
}

// deliver hands g to w's Lock, unless it has left, and reports whether it
// did.
func (st *sessionSet) deliver(w *pollWaiter, g pollGrant) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if w.gone {
		return false
	}
	w.gone = true
	st.drop(w)
	w.got <- g
	return true
}

// pollLoop polls for the set's Locks until none is left.
func (st *sessionSet) pollLoop(p *poller) {
	interval := firstPoll
	for {
		t := time.NewTimer(interval - rand.N(interval/2))
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return
		}
		st.mu.Lock()
		if st.poll != p {
			st.mu.Unlock()
			return
		}
		ws := slices.Clone(st.polled)
		st.mu.Unlock()
		if st.pollOnce(p, ws) > 0 {
			interval = firstPoll
		} else {
			interval = min(2*interval, maxPoll)
		}
	}
}

// pollOnce tries the locks of ws on a shared session, pollBatch a
// statement, hands each lock taken to its Lock, and returns how many it
// took. A lock that a lease of this process holds is left for a later poll.
func (st *sessionSet) pollOnce(p *poller, ws []*pollWaiter) int {
	if len(ws) == 0 {
		return 0
	}
	m, err := st.pick(p.ctx, st.cfg, ws[0].name)
	if err != nil {
		if p.ctx.Err() != nil {
			return 0
		}
		if errors.Is(err, ErrHeld) {
			// The session opened for the poll held the first lock before.
			st.deliver(ws[0], pollGrant{err: err})
			return 0
		}
		for _, w := range ws {
			st.deliver(w, pollGrant{err: err})
		}
		return 0
	}
	defer m.giveUp()
	taken := 0
	for batch := range slices.Chunk(ws, pollBatch) {
		n, ok := st.pollBatch(m, batch)
		taken += n
		if !ok {
			break
		}
	}
	return taken
}

// pollBatch tries the locks of ws in one statement on m, and reports how
// many it took and whether m lives on.
func (st *sessionSet) pollBatch(m *shared, ws []*pollWaiter) (int, bool) {
	var tried []*pollWaiter
	var unclaims []func()
	var sel []string
	for _, w := range ws {
		unclaim, ok := tryClaim(st.lockID(m.s.server, w.name))
		if !ok {
			continue
		}
		tried = append(tried, w)
		unclaims = append(unclaims, unclaim)
		sel = append(sel, "IS_USED_LOCK("+literal(w.name)+"), GET_LOCK("+literal(w.name)+", 0)")
	}
	if len(tried) == 0 {
		return 0, true
	}
	before := make([]sql.NullInt64, len(tried))
	got := make([]sql.NullInt64, len(tried))
	dest := make([]any, 0, 2*len(tried))
	for i := range tried {
		dest = append(dest, &before[i], &got[i])
	}
	if err := m.do("SELECT "+strings.Join(sel, ", ")+tail, dest...); err != nil {
		for _, u := range unclaims {
			u()
		}
		m.mu.Lock()
		dead := m.dead
		m.mu.Unlock()
		return 0, !dead
	}
	taken := 0
	for i, w := range tried {
		if err := m.heldBefore(w.name, before[i]); err != nil {
			unclaims[i]()
			st.deliver(w, pollGrant{err: err})
			continue
		}
		if got[i].Int64 != 1 {
			unclaims[i]()
			if before[i].Valid {
				w.holder = before[i].Int64
			}
			continue
		}
		taken++
		m.mu.Lock()
		m.pending++
		m.mu.Unlock()
		if !st.deliver(w, pollGrant{m: m, holder: w.holder, unclaim: unclaims[i]}) {
			m.release(w.name)
			unclaims[i]()
		}
	}
	return taken, true
}
