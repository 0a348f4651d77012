package redislease

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A session is what the leases taken through one client share on its
// server: two connections of the issuer's own, whatever the number of
// leases, and four goroutines. A Sentinel client's session dials the
// primary its Sentinels name, again after every failure of a connection,
// so it follows a failover. A Cluster client has a session on each node
// that serves a slot of a key it locks: a lease whose slot moves (MOVED,
// ASK, a failover) moves to the session of the slot's new node, keeping
// its deadline.
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
	key   sessKey
	rdb   redis.UniversalClient
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

// sessKey names a session: a client, and on a Cluster the node.
type sessKey struct {
	rdb  redis.UniversalClient
	node string // the address of a Cluster node; "" for a client of one server
}

// sessions is the registry of sessions, one per client and, on a Cluster,
// per node that serves a slot of a key this process locks.
var sessions struct {
	mu sync.Mutex
	m  map[sessKey]*session
}

// join returns the session of k, started if there is none, with one more
// reference, which the caller gives back with leave. ep is the endpoint of
// the Lock that joins: a new session takes its options.
func join(k sessKey, ep *endpoint, bound time.Duration) *session {
	sessions.mu.Lock()
	defer sessions.mu.Unlock()
	s := sessions.m[k]
	if s == nil {
		if sessions.m == nil {
			sessions.m = map[sessKey]*session{}
		}
		if ep.cluster != nil {
			// A node's session dials its node, with the options of
			// the Cluster's nodes, whatever key led to it.
			// Once the caller closed its client, the options it last
			// had are all there is.
			ep.mu.Lock()
			known := ep.known
			ep.mu.Unlock()
			ep = &endpoint{rdb: ep.rdb, key: ep.key, cluster: ep.cluster, bound: ep.bound, known: known}
		}
		s = &session{
			key:     k,
			rdb:     k.rdb,
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
		sessions.m[k] = s
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
	if s.refs > 0 || !s.ep.clientClosed() && time.Since(s.idle) < sessionIdle {
		s.mu.Unlock()
		sessions.mu.Unlock()
		return false
	}
	s.closed = true
	delete(sessions.m, s.key)
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
	trk, err := s.ep.dialAt(ctx, false, s.key.node)
	if err != nil {
		return nil, err
	}
	if trk.role() != "master" {
		trk.close()
		return nil, &serverError{msg: fmt.Sprintf("READONLY the server is not a primary: a replica's address? (HELLO says its role is %s)", trk.role())}
	}
	trk.setOnPush(s.push)
	cmd, err := s.ep.dialAt(ctx, false, s.key.node)
	if err != nil {
		trk.close()
		return nil, err
	}
	if cmd.addr() != trk.addr() {
		// Behind Sentinel, dialed on either side of a failover: the
		// keys must be tracked on the server that writes them.
		a, b := trk.addr(), cmd.addr()
		cmd.close()
		trk.close()
		return nil, fmt.Errorf("%w: %s and %s", errSplit, a, b)
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

// send runs cmd, a command on one key, on the session's command
// connection; on a Cluster, a MOVED or ASK answer sends it once more to
// the node it names, as a Cluster client would (behind ASKING for ASK).
// It returns the reply and the session that gave it.
func (s *session) send(ctx context.Context, cmd []any) (reply, *session, error) {
	g, _, err := s.current(ctx)
	if err != nil {
		return reply{}, s, err
	}
	rs, err := g.cmd.pipeShared(ctx, s.bound, cmd)
	if err != nil {
		if ctx.Err() == nil {
			s.drop(g)
		}
		return reply{}, s, err
	}
	if s.key.node == "" {
		return rs[0], s, nil
	}
	cmds := [][]any{cmd}
	addr, ok := redirected(rs[0].err, "MOVED")
	if !ok {
		if addr, ok = redirected(rs[0].err, "ASK"); !ok {
			return rs[0], s, nil
		}
		cmds = [][]any{{"ASKING"}, cmd}
	}
	t := join(sessKey{rdb: s.rdb, node: addr}, s.ep, s.bound)
	defer t.leave()
	tg, _, err := t.current(ctx)
	if err != nil {
		return reply{}, t, err
	}
	rs, err = tg.cmd.pipeShared(ctx, t.bound, cmds...)
	if err != nil {
		if ctx.Err() == nil {
			t.drop(tg)
		}
		return reply{}, t, err
	}
	if rs[0].err != nil {
		return rs[0], t, nil
	}
	return rs[len(rs)-1], t, nil
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

// sleepOr waits d or until done is closed.
func sleepOr(done <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// move moves l to the session of the Cluster node at addr, behind ASKING
// if asking (its slot migrates there), unless it was lost or released:
// the node's session reads its key at once, which tracks it there, and
// renews it from then on. Its deadline runs on meanwhile.
func (l *Lease) move(addr string, asking bool) {
	l.mv.Lock()
	defer l.mv.Unlock()
	from := l.sess
	if l.gone {
		return
	}
	if from.key.node == addr {
		from.mu.Lock()
		l.asking = asking
		from.mu.Unlock()
		return
	}
	to := join(sessKey{rdb: from.rdb, node: addr}, from.ep, from.bound)
	to.mu.Lock()
	l.asking = asking
	to.leases[l] = struct{}{}
	to.holders[l.key] = l
	to.pushed[l.key] = struct{}{}
	to.mu.Unlock()
	from.forget(l) // gives back l's reference to from; to's was taken by join
	l.sess = to
	poke(to.checkC)
	poke(to.renewC)
}
