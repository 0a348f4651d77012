package core

import (
	"context"
	"runtime"
	"sync"
	"unsafe"

	"github.com/zukhruf/lease/lost"
)

// A shard is one part of a registry: callbacks, merged leases and contexts
// registered on a live lease, under one lock. A registry starts with one
// shard, its own, locked by the Lease's mutex; at the first sign that
// registrations on the lease run on more than one core at once it adds a
// shardSet, one shard per core, each with its own lock and its own lease
// context, and registrations go to the shard of the core they run on. A loss
// or an end takes every shard's contents off under that shard's lock.
// docs/design.md argues the design and gives its figures.
type shard struct {
	lock *sync.Mutex // the Lease's mutex for a registry's own shard, else mu of the setShard

	waiters *waiter // AfterLoss callbacks and merged leases, newest first

	// ctx is the lease as a context, made by the first Context with a parent
	// that carries nothing (Background or TODO) that comes to this shard;
	// such contexts are its children. Set once, under lock; Context reads it
	// without the lock.
	ctx contextSlot

	// ctxs are the contexts made from any other parent, and the entries
	// their cancels emptied. A context whose parent ends is not taken off
	// at once (that would need a registration on the parent for every
	// context, three allocations): when ctxs reaches limit, the next entry
	// first compacts it, keeping the contexts still live, and sets limit to
	// twice them. So ctxs never holds more than twice the most contexts of
	// this shard live at once, whatever holders forget, for at most two
	// looks per entry on average; docs/design.md argues it.
	ctxs  []ctxEntry
	limit int
	looks int // entries compactions looked at, for tests of the bound
}

// A setShard is a shard of a shardSet, with its lock, padded so that no two
// shards' locks share a cache line (128 bytes: the adjacent-line prefetch of
// x86-64 pairs 64-byte lines).
type setShard struct {
	mu sync.Mutex
	shard
	_ [128 - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(shard{})]byte
}

// A shardSet is what a registry adds once it sees contention: one shard for
// each core, up to maxShards, found by the index of the core (the runtime's
// P) that the registration runs on.
type shardSet struct {
	// all is set once registrations were found contending for the
	// Lease's mutex: from then on every registration goes to the set.
	// Until then only the lease contexts of children made from Background
	// do, a set being made for them at the first child made on another
	// core than the registry's own lease context.
	all    flag
	mask   int
	shards []setShard
}

// maxShards caps the shards of one lease: 64 shards are 8 KiB, made once per
// contended lease; on a machine with more cores two or more share a shard.
const maxShards = 64

func newShardSet() *shardSet {
	n := 1
	for n < runtime.GOMAXPROCS(0) && n < maxShards {
		n <<= 1
	}
	set := &shardSet{mask: n - 1, shards: make([]setShard, n)}
	for i := range set.shards {
		set.shards[i].lock = &set.shards[i].mu
	}
	return set
}

// pick returns the shard of the core the caller runs on. The caller may move
// to another core before it takes the shard's lock: the shard is a hint that
// keeps two cores apart, not a rule, and any shard is correct.
func (set *shardSet) pick() *shard { return &set.shards[procHint()&set.mask].shard }

// procHint returns the index of the runtime's P that the caller runs on: 0
// with GOMAXPROCS 1, and below GOMAXPROCS. procPin and procUnpin are the
// runtime's own (sync.Pool pins the same way); the linkname to them is one
// the runtime keeps for packages outside the standard library (Go issue
// 67401). They cost 4.5 to 5.4 ns together (BenchmarkProcHint, 2-core AMD
// EPYC shared with other builds), on a registration of 60 to 400 ns, and
// buy the scaling of docs/benchmarks.md's table "Every core at once": a hash
// of the goroutine would put two goroutines of one core on two shards and
// two cores on one.
func procHint() int {
	p := procPin()
	procUnpin()
	return p
}

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// A taken is what a loss or an end took off a shard under its lock, to fire
// or drop after the lock is let go.
type taken struct {
	ctx     *leaseContext
	ctxs    []ctxEntry
	waiters *waiter
}

// take empties sh and returns what it held. sh's lock must be held. The
// shard's own context stays in its slot, where Context finds it without the
// lock: cancelled with the loss, or never cancelled after an end.
func (sh *shard) take() taken {
	t := taken{sh.ctx.load(), sh.ctxs, sh.waiters}
	sh.ctxs, sh.waiters, sh.limit = nil, nil, 0
	return t
}

// fire cancels every context in t and loses or starts every waiter, after
// the loss.
func (t taken) fire(err *lost.Error) {
	if t.ctx != nil {
		t.ctx.cancel(err)
	}
	for i := range t.ctxs {
		if cancel := t.ctxs[i].cancel; cancel != nil {
			cancel(err)
		}
	}
	for w := t.waiters; w != nil; {
		next, f, lose := w.detach()
		if lose != nil {
			lose(err)
		} else {
			go f()
		}
		w = next
	}
}

// drop drops every waiter in t, so that a stop func the holder keeps keeps
// nothing alive: the lease is ended and nothing can fire any more.
func (t taken) drop() {
	for w := t.waiters; w != nil; {
		w, _, _ = w.detach()
	}
}

// walk calls f with what each shard of set held, taking each under its lock.
func (set *shardSet) walk(f func(taken)) {
	if set == nil {
		return
	}
	for i := range set.shards {
		sh := &set.shards[i]
		sh.mu.Lock()
		t := sh.take()
		sh.mu.Unlock()
		f(t)
	}
}

// leaseContext returns sh's lease context, made if need be. sh's lock must be
// held, on a lease found live.
func (sh *shard) leaseContext() *leaseContext {
	lc := sh.ctx.load()
	if lc == nil {
		lc = &leaseContext{p: procHint()}
		lc.ctx, lc.cancel = context.WithCancelCause(context.Background())
		sh.ctx.store(lc)
	}
	return lc
}
