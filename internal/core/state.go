package core

import (
	syncatomic "sync/atomic"
	"unsafe"

	"go.uber.org/atomic"
)

// This file is the only one that names an atomic package, so that the choice of
// package stays a detail of the state word and the done slot.

// A state is where a lease stands: live, then lost or ended, never back.
type state = uint32

const (
	stateLive   state = iota // held: no loss yet, no release yet
	stateLosing              // Lose is writing the cause and closing Done; readers wait for Done
	stateLost                // lost: the reason is stored and Done is closed
	stateEnded               // released by its holder: nothing can lose it any more
)

// stateWord holds the state. Err reads it with one atomic load. A live lease
// leaves the live state only by a compare-and-swap, End's or Lose's, neither
// made under a lock; losing becomes lost by Lose's store, after everything
// the new state publishes.
type stateWord struct{ v atomic.Uint32 }

func (w *stateWord) load() state             { return w.v.Load() }
func (w *stateWord) store(s state)           { w.v.Store(s) }
func (w *stateWord) cas(old, new state) bool { return w.v.CompareAndSwap(old, new) }

// The Done channel, once made, lives in Lease.done as an unsafe.Pointer: a
// channel is a pointer to the runtime's channel header, and keeping it as one
// word loaded with sync/atomic directly is what lets Done be inlined into a
// holder's select. Anything heavier (an atomic.Value and its type assertion,
// or one more wrapper type or method) pushes Done over the compiler's
// inlining budget; for the same reason Done's fast path is written here, next
// to the load, rather than through a helper. done goes from nil to a channel
// once, by a compare-and-swap: makeDone's new channel, or Lose's closedchan
// when nobody asked for one; only Lose closes it.

// Done returns a channel that is closed at the loss.
func (l *Lease) Done() <-chan struct{} {
	if p := syncatomic.LoadPointer(&l.done); p != nil {
		return *(*chan struct{})(unsafe.Pointer(&p))
	}
	return l.makeDone()
}

func (l *Lease) loadDone() chan struct{} {
	p := syncatomic.LoadPointer(&l.done)
	return *(*chan struct{})(unsafe.Pointer(&p))
}

// casDone stores c in done if done is nil, and reports whether it did.
func (l *Lease) casDone(c chan struct{}) bool {
	return syncatomic.CompareAndSwapPointer(&l.done, nil, *(*unsafe.Pointer)(unsafe.Pointer(&c)))
}

// registrySlot holds a lease's registry. It is written only with the Lease's
// mutex held; Lose and End read it without the mutex to learn whether there
// is anything to take off, and Context to find the lease's own context, so it
// is an atomic pointer.
type registrySlot struct{ p atomic.Pointer[registry] }

func (s *registrySlot) load() *registry   { return s.p.Load() }
func (s *registrySlot) store(r *registry) { s.p.Store(r) }

// contextSlot holds the lease's own context once made; see registrySlot.
type contextSlot struct{ p atomic.Pointer[leaseContext] }

func (s *contextSlot) load() *leaseContext   { return s.p.Load() }
func (s *contextSlot) store(c *leaseContext) { s.p.Store(c) }

// setSlot holds a registry's shardSet once made; see registrySlot.
type setSlot struct{ p atomic.Pointer[shardSet] }

func (s *setSlot) load() *shardSet   { return s.p.Load() }
func (s *setSlot) store(t *shardSet) { s.p.Store(t) }

// shardSlot holds the shard a waiter is linked in. It is written under that
// shard's lock, or by a loss or an end that took the waiter off; stop reads
// it first without a lock, to learn which lock to take.
type shardSlot struct{ p atomic.Pointer[shard] }

func (s *shardSlot) load() *shard    { return s.p.Load() }
func (s *shardSlot) store(sh *shard) { s.p.Store(sh) }

// flag is a bool set once, under a lock, and read without it.
type flag struct{ v atomic.Bool }

func (f *flag) load() bool   { return f.v.Load() }
func (f *flag) store(b bool) { f.v.Store(b) }
