package core

import (
	"strings"
	"unsafe"

	"github.com/zukhruf/lease/lost"
)

// A merged lease is lost with the error of the first of its sources to be
// lost. It is an ordinary Lease, so everything a holder does with a signal
// works on it, with one registration on each source: a waiter whose lose
// loses the merged lease with the source's own *lost.Error.
//
// The registrations are what a long-lived source would otherwise keep for
// ever (the leak of the Web's AbortSignal.any), so they go as soon as they
// cannot matter: at release, at the merged lease's loss, and, one by one, as
// each source ends.
type merged struct {
	Lease          // the merged lease itself, first, so that asMerged finds m; &m.Lease is what Any returns
	srcs  []waiter // one per source, all in one allocation
}

// Any returns a lease that is lost with the very error of the first of its n
// sources to be lost, and a release func that ends it and takes its
// registrations off the sources. src(i) returns the i-th source; it is called
// once for each i, before Any returns.
//
// Sources already lost are looked at in order, so the first of them in the
// order given wins. Any of no source gives a lease that is never lost.
func Any(n int, src func(i int) *Lease) (l *Lease, release func()) {
	m := &merged{srcs: make([]waiter, n)}
	m.err = *lost.New(mergedSubject, fromSource{})
	lose := m.lose // one func for every waiter
	// Every waiter is complete before the first is shared: a source lost
	// during the loop reads all of them to take them off.
	for i := range m.srcs {
		m.srcs[i] = waiter{lease: src(i), lose: lose}
	}
	for i := range m.srcs {
		w := &m.srcs[i]
		if w.lease.add(w) {
			continue
		}
		if err := w.lease.Err(); err != nil {
			m.lose(err.(*lost.Error))
			break
		}
		// An ended source can never lose m: nothing to register.
	}
	// A source lost while the loop ran may have lost m, and m.unregister
	// taken the waiters off, before later ones were added. An add stores
	// the waiter's shard under that shard's lock, and that unregister's
	// stop reads it: either the stop finds the shard and takes its lock
	// after the add, or it finds none because the add comes second; m was
	// lost before the stop, so then the state read here sees the loss and
	// the late waiters go too.
	if m.state.load() != stateLive {
		m.unregister()
	}
	return &m.Lease, m.release
}

// subjects returns the subjects of m's sources, joined by ", ", for String.
// They are read only when asked for: a merged lease's Err reports its
// source's error, which names the source's subject.
func (m *merged) subjects() string {
	subjects := make([]string, len(m.srcs))
	for i := range m.srcs {
		subjects[i] = m.srcs[i].lease.Subject()
	}
	return strings.Join(subjects, ", ")
}

// lose loses m with err, the error of one of its sources, and takes m's
// registrations off the other sources, which can no longer change it.
func (m *merged) lose(err *lost.Error) {
	if m.loseWith(err) {
		m.unregister()
	}
}

// release ends m, so that nothing loses it any more and its own
// registrations are dropped, then takes it off its sources.
func (m *merged) release() {
	m.End()
	m.unregister()
}

// unregister takes m's waiters off the sources that are still live. A
// source that is lost or ended has taken them off with its registry, or will.
func (m *merged) unregister() {
	for i := range m.srcs {
		m.srcs[i].stop()
	}
}

// loseWith loses a merged lease with err, its source's error, which Err then
// reports as it is.
func (l *Lease) loseWith(err *lost.Error) bool { return l.lose(fromSource{err}) }

// asMerged returns the merged lease whose Lease l is; l must be one.
func (l *Lease) asMerged() *merged { return (*merged)(unsafe.Pointer(l)) }
