package k8slease

import (
	"container/heap"
	"context"
	"reflect"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// A session is what the leases of one clientset and namespace share, held
// and waited for alike: one watch on the namespace's Leases, whose events
// reach the lease or the waiting Lock of their Lease's name, and one
// scheduler that sends each held lease's renewals when they are due, at most
// maxRenewing of them at once. It lives while a lease or a Lock uses it: the
// first one starts it, the last one stops it, and its goroutines with it.
//
// The watch has no label selector: a record written by another candidate
// (client-go's LeaderElector, kubectl) needs no label of ours, and an object
// that lost one would reach a selecting watch as a deletion. It has no
// resync either: nothing is cached, a lease compares each event of its name
// with what it wrote. It starts at the apiserver's current version with no
// initial events (sendInitialEvents=false, resourceVersionMatch=NotOlderThan;
// an apiserver that refuses them gets a plain watch, whose initial events of
// the namespace's Leases are older than any lease's own write and change
// nothing), and when the apiserver ends it, it is opened again from the last
// version it delivered, bookmarks included, so that no event is missed. Only
// a 410 Gone (that version compacted away) loses events: the watch starts
// again from the current version, the waiting Locks read their Lease again,
// and a held lease learns of a change made in the gap at its next renewal,
// a conditional write that meets a conflict if anything was written since.
type session struct {
	key    sessionKey
	leases coordinationclient.LeaseInterface

	mu   sync.Mutex
	subs map[string][]*sub // by the Lease's name
	refs int               // the subs, over every name
	run  *run              // the goroutines of this session's life

	// The watch.
	established bool          // a watch was opened since the last start or 410, so no later event is missed
	attempts    uint64        // the openings tried, answered or not
	attempted   chan struct{} // closed, and made again, at each opening's outcome
	lastErr     error         // the outcome of the last opening, nil if it opened

	// The renewals.
	due  renewals      // the held leases by their next renewal
	wake chan struct{} // the scheduler looks at due again
}

// sessionKey names a session: a clientset and a namespace.
type sessionKey struct {
	cs        kubernetes.Interface
	namespace string
}

// run is one life of a session: from its first user to its last.
type run struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when every goroutine of the run has returned
	slots  chan struct{} // one for each renewal in flight
}

// baseRenewing is how many renewals of one session are in flight at once
// while each is sent in time, and maxRenewing how many once one is late,
// each a goroutine for the time of its request (and client-go's own for
// it): a session's goroutines grow with the renewals under way, not with
// its leases. The renewals due together are sent baseRenewing at a time;
// one that has waited for a slot half of its round-trip allowance (lease
// duration less margin and renewal period: 400 ms of a 2 s lease, 5.75 s
// of the zero Config's) takes one of the slots beyond, so that renewals
// whose round trips are slow still fit in their allowance. An apiserver
// that answers fewer renewals than are due leaves each waiting less than
// that while it keeps up at all (a renewal every 4.4 s instead of 2 s at
// 1,000 leases of the zero Config on a loaded 2-core machine), and more
// slots would only queue more requests in it.
//
// At a round trip r, n renewals in flight carry n/r a second: 8 at 20 ms
// carry 400, the renewals of 800 leases of the zero Config, more than the
// apiserver of a 2-core machine answered (386 requests a second, at 1,000
// leases; an apiserver that answers slower than that is the bound, and
// more requests in flight only wait in its queue). 32 carry the renewals
// due together of 256 leases of 2 s within the 400 ms left, at a round trip
// of 50 ms.
const (
	baseRenewing = 8
	maxRenewing  = 32
)

var sessions = struct {
	mu sync.Mutex
	m  map[sessionKey]*session
}{m: make(map[sessionKey]*session)}

// join returns a new sub of the session of cs and namespace for the Lease
// name, starting the session if it is not running. A clientset that a map
// cannot take as a key gets a session of its own. Call leave once.
func join(cs kubernetes.Interface, namespace, name string) *sub {
	key := sessionKey{cs, namespace}
	shared := reflect.ValueOf(cs).Comparable()
	var s *session
	if shared {
		sessions.mu.Lock()
		s = sessions.m[key]
		if s == nil {
			s = newSession(cs, namespace)
			sessions.m[key] = s
		}
		// Joined under sessions.mu: a session that is left by its last
		// user is dropped from the map under the same lock.
		b := s.join(name)
		sessions.mu.Unlock()
		return b
	}
	return newSession(cs, namespace).join(name)
}

func newSession(cs kubernetes.Interface, namespace string) *session {
	return &session{
		key:       sessionKey{cs, namespace},
		leases:    cs.CoordinationV1().Leases(namespace),
		subs:      make(map[string][]*sub),
		attempted: make(chan struct{}),
		wake:      make(chan struct{}, 1),
	}
}

func (s *session) join(name string) *sub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		ctx, cancel := context.WithCancel(context.Background())
		r := &run{ctx: ctx, cancel: cancel, done: make(chan struct{}), slots: make(chan struct{}, maxRenewing)}
		s.run = r
		s.established, s.lastErr = false, nil
		r.wg.Add(2)
		go s.watch(r)
		go s.schedule(r)
		go func() {
			r.wg.Wait()
			close(r.done)
		}()
	}
	b := &sub{s: s, run: s.run, name: name, known: -1, wake: make(chan struct{}, 1)}
	s.subs[name] = append(s.subs[name], b)
	s.refs++
	return b
}

// leave ends b's use of its session, and stops the session if b was its
// last user; it returns the run that b was part of. Successive calls do
// nothing more.
func (b *sub) leave() *run {
	s := b.s
	sessions.mu.Lock()
	defer sessions.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.left {
		return b.run
	}
	b.left = true
	subs := s.subs[b.name]
	for i, o := range subs {
		if o == b {
			subs = append(subs[:i], subs[i+1:]...)
			break
		}
	}
	if len(subs) == 0 {
		delete(s.subs, b.name)
	} else {
		s.subs[b.name] = subs
	}
	s.refs--
	if s.refs == 0 {
		s.run.cancel()
		s.run = nil
		s.due = nil
		if sessions.m[s.key] == s {
			delete(sessions.m, s.key)
		}
	}
	return b.run
}

// leaveAndWait is leave, and then, if the session stopped, a wait for its
// goroutines: a Lock or Unlock that returns leaves none behind.
func (b *sub) leaveAndWait() {
	r := b.leave()
	if r.ctx.Err() != nil {
		<-r.done
	}
}

// sub is a lease's, or a waiting Lock's, place in its session: the events of
// its Lease's name reach it. A waiting Lock's sub becomes its lease's when
// the Lock is granted.
type sub struct {
	s    *session
	run  *run
	name string

	// Guarded by s.mu.
	left   bool
	known  int64    // the version this Lock last read, or its lease wrote; -1 before the first read
	recent []pushed // the events of a waiting Lock since its last read, for the grant to check
	lease  *Lease   // the lease once granted
	wake   chan struct{}
}

// pushed is one event of the watch on a Lease.
type pushed struct {
	typ watch.EventType
	rv  int64
	obj *coordinationv1.Lease
}

// recentMax bounds the events a waiting Lock keeps between its read and its
// grant: a round trip's worth. An event dropped past it is caught by the
// lease's first renewal, a conditional write that meets its conflict.
const recentMax = 16

// established waits until the session's watch is open, or its next opening
// fails, and returns that failure.
func (b *sub) established(ctx context.Context) error {
	s := b.s
	s.mu.Lock()
	if s.established && s.lastErr == nil {
		s.mu.Unlock()
		return nil
	}
	if s.lastErr != nil {
		// The watch is down: this Lock could not follow what it takes.
		err := s.lastErr
		s.mu.Unlock()
		return err
	}
	n, ch := s.attempts, s.attempted
	s.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.run.ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		s.mu.Lock()
		ok, err, later := s.established, s.lastErr, s.attempts > n
		ch = s.attempted
		s.mu.Unlock()
		switch {
		case later && err != nil:
			return err
		case ok:
			return nil
		}
	}
}

// read records that the waiting Lock read its Lease at version rv (0 if
// there is none), and wakes it if an event since then came before.
func (b *sub) read(rv int64) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.known = rv
	kept := b.recent[:0]
	for _, p := range b.recent {
		if p.rv > rv {
			kept = append(kept, p)
		}
	}
	clear(b.recent[len(kept):])
	b.recent = kept
	if len(kept) > 0 {
		b.notify()
	}
}

// latest returns the newest version of the Lease the watch delivered
// since the waiting Lock's last read or latest, if any, and counts it as
// read: it stands for a read that costs no request. A deletion's is nil.
func (b *sub) latest() (cur *coordinationv1.Lease, ok bool) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.known < 0 || len(b.recent) == 0 {
		return nil, false
	}
	p := b.recent[len(b.recent)-1]
	clear(b.recent)
	b.recent = b.recent[:0]
	b.known = p.rv
	if p.typ == watch.Deleted {
		return nil, true
	}
	return p.obj.DeepCopy(), true // the event's object is every sub's of its name
}

// hold makes b the sub of l, granted by the write that left the Lease at
// version rv, and loses l at once if an event after rv came before.
func (b *sub) hold(l *Lease, rv int64) {
	s := b.s
	s.mu.Lock()
	b.lease, b.known = l, rv
	var cause error
	for _, p := range b.recent {
		if p.rv > rv && cause == nil {
			cause = l.pushed(p)
		}
	}
	b.recent = nil
	s.mu.Unlock()
	if cause != nil {
		l.lose(cause)
	}
}

func (b *sub) notify() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// watch keeps the session's watch open until the run ends, and hands each
// event to the subs of its Lease's name.
func (s *session) watch(r *run) {
	defer r.wg.Done()
	var retries backoff
	rv, plain := "", false
	for r.ctx.Err() == nil {
		opts := metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}
		if rv == "" && !plain {
			no := false
			opts.SendInitialEvents, opts.ResourceVersionMatch = &no, metav1.ResourceVersionMatchNotOlderThan
		}
		opened := time.Now()
		w, err := s.leases.Watch(r.ctx, opts)
		if err != nil && rv == "" && !plain && (apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)) {
			plain = true // an apiserver without WatchList: a plain watch from now
			continue
		}
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
				s.gone(r)
			}
			s.opened(r, err)
			pauseFor(r.ctx, retries.pause())
			continue
		}
		s.opened(r, nil)
		rv = s.drain(r, w, rv)
		w.Stop()
		if time.Since(opened) >= backoffMax {
			retries.reset()
		}
		pauseFor(r.ctx, retries.pause()) // a watch that fails at once must not spin
	}
}

// opened records the outcome of an opening of the watch.
func (s *session) opened(r *run, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != r {
		return
	}
	if err == nil {
		s.established = true
	}
	s.attempts++
	s.lastErr = err
	close(s.attempted)
	s.attempted = make(chan struct{})
}

// gone records that the watch missed events: the waiting Locks read their
// Lease again, and the next opening starts from the current version.
func (s *session) gone(r *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != r {
		return
	}
	s.established = false
	for _, subs := range s.subs {
		for _, b := range subs {
			if b.lease == nil {
				// Events were missed: the next round reads.
				clear(b.recent)
				b.recent = b.recent[:0]
				b.notify()
			}
		}
	}
}

// drain reads the events of w until it ends, and returns the last
// resourceVersion seen ("" if the apiserver no longer has it).
func (s *session) drain(r *run, w watch.Interface, rv string) string {
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-r.ctx.Done():
			return rv
		case ev, ok = <-w.ResultChan():
			if !ok {
				return rv
			}
		}
		switch ev.Type {
		case watch.Error:
			if st := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(st) || apierrors.IsGone(st) {
				s.gone(r)
				return ""
			}
			return rv
		case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
			got, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			rv = got.ResourceVersion
			if ev.Type != watch.Bookmark {
				s.dispatch(r, ev.Type, got)
			}
		}
	}
}

// dispatch hands an event to the subs of its Lease's name: a waiting Lock
// is woken, a lease whose record it no longer stands for is lost.
func (s *session) dispatch(r *run, typ watch.EventType, got *coordinationv1.Lease) {
	v, err := strconv.ParseInt(got.ResourceVersion, 10, 64)
	if err != nil {
		v = 0 // not comparable: taken as older than any read, newer than none
	}
	p := pushed{typ: typ, rv: v, obj: got}
	type loss struct {
		l     *Lease
		cause error
	}
	var losses []loss
	s.mu.Lock()
	if s.run != r {
		s.mu.Unlock()
		return
	}
	for _, b := range s.subs[got.Name] {
		switch {
		case b.lease != nil:
			if v > b.known {
				if cause := b.lease.pushed(p); cause != nil {
					losses = append(losses, loss{b.lease, cause})
				}
			}
		case b.known < 0 || v > b.known:
			if len(b.recent) == recentMax {
				copy(b.recent, b.recent[1:])
				b.recent = b.recent[:recentMax-1]
			}
			b.recent = append(b.recent, p)
			if b.known >= 0 {
				b.notify()
			}
		}
	}
	s.mu.Unlock()
	for _, x := range losses {
		x.l.lose(x.cause) // lose waits on nothing: the signal, the deadline's mutex, a cancel
	}
}

// schedule sends the renewals of the session's held leases as they come
// due, each in a goroutine of its own for the time of its request,
// baseRenewing at once, and up to maxRenewing once a renewal is late (see
// baseRenewing), until the run ends.
func (s *session) schedule(r *run) {
	defer r.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		var l *Lease
		wait := time.Hour // until a renewal is due, is late, or a slot frees
		if s.run == r && len(s.due) > 0 {
			head, inFlight := s.due[0], len(r.slots)
			switch due := time.Until(head.next); {
			case due > 0:
				wait = due
			case inFlight < baseRenewing:
				l = heap.Pop(&s.due).(*Lease)
			case inFlight >= maxRenewing:
			case -due >= head.lateAfter():
				l = heap.Pop(&s.due).(*Lease)
			default:
				wait = head.lateAfter() + due
			}
		}
		s.mu.Unlock()
		if l != nil {
			select {
			case r.slots <- struct{}{}: // only this goroutine fills them: never blocks
			case <-r.ctx.Done():
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer s.slotFreed(r)
				if next, ok := l.renewOnce(); ok {
					s.renewAt(l, next)
				}
			}()
			continue
		}
		t.Reset(wait)
		select {
		case <-r.ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// slotFreed gives a renewal's slot back and wakes the scheduler, which may
// have a renewal waiting for it.
func (s *session) slotFreed(r *run) {
	<-r.slots
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// lateAfter is how long l's due renewal waits for one of the slots beyond
// baseRenewing: half of its round-trip allowance.
func (l *Lease) lateAfter() time.Duration { return l.cfg.roundTrip() / 2 }

// renewAt schedules l's next renewal at at, unless its renewals ended.
func (s *session) renewAt(l *Lease, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.renewEnded || s.run == nil {
		return
	}
	l.next = at
	if l.index >= 0 {
		heap.Fix(&s.due, l.index)
	} else {
		heap.Push(&s.due, l)
	}
	if l.index == 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// unschedule ends l's renewals: none is sent after it returns but the one
// in flight, if any.
func (s *session) unschedule(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.renewEnded = true
	if l.index >= 0 && s.run != nil {
		heap.Remove(&s.due, l.index)
	}
}

// renewals is a heap of leases by their next renewal.
type renewals []*Lease

func (h renewals) Len() int           { return len(h) }
func (h renewals) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h renewals) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *renewals) Push(x any) {
	l := x.(*Lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *renewals) Pop() any {
	old := *h
	n := len(old)
	l := old[n-1]
	old[n-1] = nil
	l.index = -1
	*h = old[:n-1]
	return l
}
