package natslease

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// A waiter is a Lock that is not granted yet: the watcher wakes it when its
// key is deleted, purged or expires, and keeps the last entry of its key it
// saw, which the Lock judges once granted (an entry may come between the
// grant's answer and the lease's first event).
type waiter struct {
	key  string
	wake chan struct{} // capacity 1
	last jetstream.KeyValueEntry
}

// await registers a waiter on key; the caller calls unwait.
func (s *session) await(key string) *waiter {
	w := &waiter{key: key, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiters[key] == nil {
		s.waiters[key] = map[*waiter]struct{}{}
	}
	s.waiters[key][w] = struct{}{}
	return w
}

// unwait removes w, and returns the last entry of its key it saw.
func (s *session) unwait(w *waiter) jetstream.KeyValueEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiters[w.key], w)
	if len(s.waiters[w.key]) == 0 {
		delete(s.waiters, w.key)
	}
	return w.last
}

// follow reads the session's watcher: one watcher of the whole bucket for
// every lease and waiting Lock of the session, so that its cost grows with
// the bucket's writes, not with the leases. The watcher is an ordered
// consumer: after a reconnection or a leader change it goes on from the
// last entry it delivered, so no write is skipped.
func (s *session) follow(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				s.event(e)
			}
		}
	}
}

// event judges one entry of the bucket: it wakes the Locks that wait for
// its key if the key is free, and loses the lease on the key if the entry
// is not the lease's own write.
func (s *session) event(e jetstream.KeyValueEntry) {
	key := e.Key()
	free := e.Operation() != jetstream.KeyValuePut
	s.mu.Lock()
	l := s.leases[key]
	for w := range s.waiters[key] {
		if w.last == nil || e.Revision() > w.last.Revision() {
			w.last = e
		}
		if free {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
	s.mu.Unlock()
	if l != nil {
		l.judge(e)
	}
}

// judge loses l if e, an entry of its key, is not its own: a write after
// its grant by another client, a delete, a purge. Nothing runs between
// reading e and the loss.
func (l *Lease) judge(e jetstream.KeyValueEntry) {
	rev := e.Revision()
	if rev <= l.granted {
		return // the grant's own entry, or one before it
	}
	switch e.Operation() {
	case jetstream.KeyValuePut:
		if bytes.Equal(e.Value(), l.value) {
			l.seen(rev) // a renewal of this lease, perhaps one whose answer was lost
			return
		}
		l.lose(fmt.Errorf("%w: revision %d of key %q holds another value (%.60q)", ErrTakenOver, rev, l.key, e.Value()))
	case jetstream.KeyValueDelete:
		l.lose(fmt.Errorf("%w: a delete marker at revision %d of key %q", ErrDeleted, rev, l.key))
	case jetstream.KeyValuePurge:
		l.lose(fmt.Errorf("%w: a purge marker at revision %d of key %q (an operator's purge, or the key's TTL ran out on the server)", ErrPurged, rev, l.key))
	}
}
