// Package core holds the state machine behind a lease. Package signal gives the
// holder a read-only view of it and package controller the power to lose or end
// it; see the note on [Lease] for how they share it.
package core

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/zukhruf/lease/lost"
)

// Lease is the state machine of one lease: live, then lost with a reason or
// ended, once.
//
// signal.Signal is a struct whose only field is a Lease, and
// controller.Controller a struct whose only field is a Signal, so the three
// share one address and one allocation: Controller.Signal returns a pointer
// into the Controller. Go converts between neither pointer type (their
// unexported fields make the structs distinct), so a holder cannot turn its
// *signal.Signal into anything that loses or ends it; package controller
// reaches the Lease through package unsafe, which a compile-time size check
// in each package keeps valid.
//
// The zero Lease is live with an empty subject.
type Lease struct {
	_     noCopy
	state stateWord
	mu    sync.Mutex // guards regs and its registry's own shard; state and done change by compare-and-swap, see Lose, End and makeDone
	// err is the error Err returns, kept in the lease so that a loss makes no
	// allocation of its own. Its subject is set by New and never written
	// again, so it is read at any time; its cause is written once, by the
	// Lose that moved the state to losing, and read only once the loss is
	// complete. For a lease made by Any, the cause is a fromSource.
	err  lost.Error
	done unsafe.Pointer // the Done channel once made; see Done
	regs registrySlot   // what is registered, until the loss or the end takes it off; nil until the first registration
}

// noCopy makes go vet's copylocks check report a copied Lease.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// A registry holds what is registered on a live lease. It is made at the
// first registration, so that a lease nobody registers on stays one
// allocation of 64 bytes, and dropped at the loss or the end. Its own shard
// is locked by the Lease's mutex; once a registration finds that mutex held
// by another (a failed TryLock), or a context made from Background runs on
// another core than the one that made the lease's context, the registry adds
// a shardSet and later registrations go to the shard of their core (see
// shard.go).
type registry struct {
	shard         // under the Lease's mutex
	set   setSlot // set once, under the Lease's mutex, while the lease is live
}

// A leaseContext is a shard's lease context, the func that cancels it with
// the loss, and the index of the core that made it.
type leaseContext struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	p      int
}

// A ctxEntry is a context made from a parent other than Background, with the
// func that cancels it with the loss; both are nil once its cancel took it
// off in place (see dropCtx).
type ctxEntry struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// A waiter is one registration of an AfterLoss callback or a merged lease.
type waiter struct {
	lease      *Lease    // set before the waiter is shared, never changed: stop reads it unlocked
	sh         shardSlot // the shard w was linked in, stored under its lock; nil until then
	prev, next *waiter
	f          func()                // AfterLoss: started in its own goroutine
	lose       func(err *lost.Error) // Any: loses the merged lease with the source's error
}

// unlink clears w's links and what it would call, so that a stop func the
// holder keeps does not keep the callback alive. It runs with the shard's
// lock held. It leaves w's shard in place: a waiter with nothing to call is
// one that was stopped, which a later stop finds under the same lock.
func (w *waiter) unlink() {
	w.prev, w.next, w.f, w.lose = nil, nil, nil, nil
}

// detach clears w's links and what it would call, and returns them. Lose and
// End, or a registration that found the lease no longer live
// (unlockRegistered), call it without a lock, on waiters taken off a lease
// that is no longer live: a concurrent stop sees the state and leaves them
// alone.
func (w *waiter) detach() (next *waiter, f func(), lose func(*lost.Error)) {
	next, f, lose = w.next, w.f, w.lose
	w.prev, w.next, w.f, w.lose = nil, nil, nil, nil
	return next, f, lose
}

// closedchan is returned by Done when the lease was lost before anyone asked
// for the channel, so that such a loss makes no channel.
var closedchan = make(chan struct{})

func init() { close(closedchan) }

// New returns a live lease on subject.
func New(subject string) *Lease { return &Lease{err: *lost.New(subject, nil)} }

// Subject returns what the lease gives the right to; for a merged lease, the
// subjects of its sources. The subject is never written after New, so no
// lock is needed.
func (l *Lease) Subject() string {
	if l.isMerged() {
		return l.asMerged().subjects()
	}
	return l.err.Subject()
}

// Err returns nil while the lease is live or ended, and the loss once it is lost.
// A receiver woken by the close of Done must find the error, and whoever
// finds the error must find Done closed (Go issue 75533 is this bug in
// context). Lose therefore passes through stateLosing while it writes the
// cause and closes Done, and Err in that short window waits for Done.
// Only the live state is checked inline: it is the one a holder's loop sees
// on every write, and a second branch would push Err over the compiler's
// inlining budget. Lost and ended cost a call but take no lock.
func (l *Lease) Err() error {
	if l.state.load() != stateLive {
		return l.errNotLive()
	}
	return nil
}

// errNotLive is a leaf for a lost lease, with no frame to set up, since that
// is the case every goroutine of a holder meets at once after a loss.
func (l *Lease) errNotLive() error {
	s := l.state.load()
	if s == stateLost {
		return l.lossErr()
	}
	return l.errLosingOrEnded(s)
}

// errLosingOrEnded is given the state errNotLive read rather than reading it
// again: a lease that was losing at that read may be lost by now, and a second
// read would take it for ended and return nil to a receiver woken by Done.
//
//go:noinline
func (l *Lease) errLosingOrEnded(s state) error {
	if s == stateLosing {
		return l.awaitLoss()
	}
	return nil
}

// awaitLoss waits until the Lose under way has closed Done, and returns the
// loss. The lease must be losing or lost. It makes no channel, so that Err
// never allocates: until that Lose has put a channel in done (it writes the
// cause first, a few instructions, then either closes the channel a Done
// call made or puts closedchan there), it yields; then it receives from that
// channel, which Lose closes without waiting for anything.
func (l *Lease) awaitLoss() *lost.Error {
	for l.state.load() == stateLosing {
		if c := l.loadDone(); c != nil {
			<-c
			break
		}
		runtime.Gosched()
	}
	return l.lossErr()
}

// lossErr returns the error of a lost lease: its own, or for a merged lease
// the very value its source reports.
func (l *Lease) lossErr() *lost.Error {
	if f, ok := l.err.Unwrap().(fromSource); ok {
		return f.err
	}
	return &l.err
}

// fromSource is the cause in the err of a merged lease: nil while it is live,
// then the error of the source that lost it. No other package can make one,
// so no issuer's cause is taken for it.
type fromSource struct{ err *lost.Error }

func (f fromSource) Error() string { return f.err.Error() }

// mergedSubject is the subject in the err of every merged lease, which no
// holder sees (a merged lease reports its source's error). It is made at run
// time, so that its bytes are at an address no other string has: a subject an
// issuer passes to New, equal or not, is never taken for it.
var mergedSubject = strings.Clone("merged")

// isMerged reports whether l was made by Any. It reads the subject, which
// never changes, rather than the cause, which a loss may be writing.
func (l *Lease) isMerged() bool {
	return unsafe.StringData(l.err.Subject()) == unsafe.StringData(mergedSubject)
}

// makeDone makes the Done channel, or finds the one another call made, or
// the closedchan of a loss that made none. It takes no lock: the channel is
// put in place by a compare-and-swap, which Lose does too, so that either
// Lose finds the new channel and closes it, or makeDone finds Lose's
// closedchan.
func (l *Lease) makeDone() chan struct{} {
	if l.state.load() == stateLost {
		// No channel is made for a loss nobody waited for; see Lose.
		return l.loadDone()
	}
	c := make(chan struct{})
	if l.casDone(c) {
		return c
	}
	return l.loadDone()
}

// Lose loses a live lease with cause and reports whether this call lost it.
func (l *Lease) Lose(cause error) bool { return l.lose(cause) }

// lose loses a live lease with cause, which for a merged lease is its
// source's *lost.Error, and reports whether this call lost it.
//
// It takes no lock until the loss is complete, so that nothing a holder does
// (a registration holds the mutex) can hold the loss back. The
// compare-and-swap to losing makes this call the only one that writes the
// cause and closes Done; End and other Loses find the state moved. Err, and
// anything else that finds the state losing, waits for Done (see awaitLoss).
// Between the compare-and-swap and the close there is nothing to wait for.
//
// What is registered is taken off afterwards, under the mutex, if there is
// anything, and fired before Lose returns. A registration racing the loss
// reads the state again once it is in (see unlockRegistered):
//
//   - If it put its entry into a registry that was there before, the load of
//     regs below finds that registry: whoever made it saw the lease live
//     after storing it, so before this call's compare-and-swap, and nothing
//     clears regs while the lease is live; after that, only this call can,
//     or a registration that made a registry of its own, which it cannot
//     while one is there.
//   - If it made the registry, the state word's and the registry slot's
//     operations are sequentially consistent, so either the load below finds
//     the registry, or that second look finds the lease no longer live;
//     where both do, the mutex lets one take it. A registry made during the
//     loss holds nothing but that one registration.
func (l *Lease) lose(cause error) bool {
	if !l.state.cas(stateLive, stateLosing) {
		l.awaitLosing()
		return false
	}
	l.completeLoss(cause)
	return true
}

// completeLoss does the rest of the loss once lose has moved the state to
// losing: it writes the cause, closes Done, moves the state to lost and fires
// what is registered.
func (l *Lease) completeLoss(cause error) {
	l.markLost(cause)
	l.fireRegistry()
}

// markLost writes the cause, closes Done and moves the state to lost, once
// lose has moved it to losing.
func (l *Lease) markLost(cause error) {
	l.setCause(cause)
	// With no channel yet, closedchan takes its place, so that a racing
	// makeDone finds it.
	if c := l.loadDone(); c != nil || !l.casDone(closedchan) {
		close(l.loadDone())
	}
	l.state.store(stateLost)
}

// fireRegistry takes off what is registered on a lost lease, if anything,
// and fires it: the registry's own shard, taken under the mutex, then each
// shard of its set, under that shard's lock.
func (l *Lease) fireRegistry() {
	if l.regs.load() == nil {
		return
	}
	r, t := l.takeRegistry()
	if r == nil {
		return
	}
	err := l.lossErr()
	t.fire(err)
	r.set.load().walk(func(t taken) { t.fire(err) })
}

// setCause writes the cause into l.err, leaving the subject alone: Subject
// reads it at any time, so the loss must not write it, even with its own
// value. Package lost gives no setter, so the write goes through
// errorFields, which lays out lost.Error; the size check below and
// TestSetCause keep the two in step.
func (l *Lease) setCause(cause error) {
	(*errorFields)(unsafe.Pointer(&l.err)).cause = cause
}

// errorFields are the fields of lost.Error, in its order.
type errorFields struct {
	subject string
	cause   error
}

// Both are zero only if lost.Error and errorFields have one size.
var (
	_ [unsafe.Sizeof(lost.Error{}) - unsafe.Sizeof(errorFields{})]byte
	_ [unsafe.Sizeof(errorFields{}) - unsafe.Sizeof(lost.Error{})]byte
)

// awaitLosing waits for a Lose under way, if there is one, to close Done, so
// that a Lose or End that reports false because of it finds the loss complete
// in Err and Done alike, as it would after that Lose returned.
func (l *Lease) awaitLosing() {
	if l.state.load() == stateLosing {
		l.awaitLoss()
	}
}

// takeRegistry takes l's registry off under the mutex and returns it with
// what its own shard held, or nil if another call took it first. The lease
// must no longer be live.
func (l *Lease) takeRegistry() (*registry, taken) {
	l.mu.Lock()
	r := l.regs.load()
	l.regs.store(nil)
	var t taken
	if r != nil {
		t = r.take()
	}
	l.mu.Unlock()
	return r, t
}

// End ends a live lease and reports whether this call ended it.
//
// It takes the mutex only when something is registered: a lease released
// as soon as its work is done, the common case, costs one compare-and-swap.
// A registration that was being made under the mutex meanwhile looks at the
// state again once it is in (see unlockRegistered): the state word's operations
// are sequentially consistent, so either End's load of regs below finds the
// registry, or that second look finds the lease ended, and takes it off. A
// registration in a shard of the registry's set looks at the state under
// the shard's lock, which End takes after it moved the state.
func (l *Lease) End() bool {
	if !l.state.cas(stateLive, stateEnded) {
		l.awaitLosing()
		return false
	}
	if l.regs.load() == nil {
		return true
	}
	if r, t := l.takeRegistry(); r != nil {
		r.drop(t)
	}
	return true
}

// drop drops every registration in r and what it holds, t being what its
// own shard held, even where the holder keeps its stop func: the lease is
// ended and nothing can fire any more. The lease's contexts are never
// cancelled now; their children stay their own, and go with them.
func (r *registry) drop(t taken) {
	t.drop()
	r.set.load().walk(taken.drop)
}

// unlockRegistered unlocks the mutex after a registration was put in the
// registry's own shard on a lease found live, and reports whether the
// registration stands: false if the lease was ended meanwhile. made says
// whether this registration made the registry. Neither End nor Lose waits
// for the mutex to move the state, and either may have looked for the
// registry before it was there:
//
//   - After an end, the registry is taken off here and dropped, as End would
//     have done.
//   - After a loss, a registry this registration made is taken off here and,
//     once Done is closed, fired; it holds only this registration. A
//     registry that was there before is left to Lose, which is sure to find
//     it (see lose) and fires every registration in it, the earlier ones
//     included, before it returns; taking it here would let that Lose return
//     before they fired.
func (l *Lease) unlockRegistered(made bool) bool {
	s := l.state.load()
	if s == stateLive || (s != stateEnded && !made) {
		l.mu.Unlock()
		return true
	}
	r := l.regs.load()
	l.regs.store(nil)
	t := r.take()
	l.mu.Unlock()
	if s == stateEnded {
		r.drop(t)
		return false
	}
	t.fire(l.awaitLoss()) // this call made r, which has no set, and has held the mutex since
	return true
}

// registry returns l's registry, made if need be, and whether this call
// made it. It runs with the mutex held, on a lease found live.
func (l *Lease) registry() (r *registry, made bool) {
	if r = l.regs.load(); r == nil {
		r, made = &registry{}, true
		r.lock = &l.mu
		l.regs.store(r)
	}
	return r, made
}

// lockShard locks the shard a registration goes to and returns it, on a
// lease found live under that lock, or returns nil with no lock held. own
// says whether it is the registry's own shard, whose lock is the mutex:
// unlockShard then looks at the state again, as unlockRegistered argues.
//
// A registration in a shard of the set needs no second look. The set was
// put in a registry that was in regs while the lease was live, and nothing
// takes a registry off a live lease, so the Lose or End that moves the state
// finds that registry, and takes every shard of its set under the shard's
// lock after moving the state: either it takes the shard after this
// registration is in, or this registration, under the lock after it,
// finds the state moved.
func (l *Lease) lockShard() (sh *shard, own, made bool) {
	if r := l.regs.load(); r != nil {
		if set := r.set.load(); set != nil && set.all.load() {
			sh = set.pick()
			sh.lock.Lock()
			if l.state.load() != stateLive {
				sh.lock.Unlock()
				return nil, false, false
			}
			return sh, false, false
		}
	}
	contended := !l.mu.TryLock()
	if contended {
		l.mu.Lock()
	}
	if l.state.load() != stateLive {
		l.mu.Unlock()
		return nil, false, false
	}
	r, made := l.registry()
	if contended && !made {
		// This registration goes to the registry's own shard; the next
		// ones, to the set's. Only a registry that was there before gets
		// a set: a registry made during a loss is taken off again by the
		// call that made it (unlockRegistered), which fires its own shard
		// alone, and a set on it could hold registrations of other calls
		// that the Lose under way would never see.
		r.spread(true)
	}
	return &r.shard, true, made
}

// spread gives r its set of shards if it has none yet, for the lease
// contexts of children made from Background; with all, for every other
// registration too. It runs with the Lease's mutex held, on a live lease,
// and only on a registry that was there before the call that holds the
// mutex: one that a registration made before it let go of the mutex, having
// seen the lease live after it was in (see lockShard).
func (r *registry) spread(all bool) {
	set := r.set.load()
	if set == nil {
		set = newShardSet()
		r.set.store(set)
	}
	if all && !set.all.load() {
		set.all.store(true)
	}
}

// unlockShard unlocks sh after a registration was put in it, and reports
// whether the registration stands; see lockShard.
func (l *Lease) unlockShard(sh *shard, own, made bool) bool {
	if own {
		return l.unlockRegistered(made)
	}
	sh.lock.Unlock()
	return true
}

// AfterLoss arranges for f to run in its own goroutine after the loss.
func (l *Lease) AfterLoss(f func()) (stop func() bool) {
	w := &waiter{lease: l, f: f}
	if !l.add(w) {
		if l.Err() != nil {
			go f()
		}
		return stopped
	}
	return w.stop
}

// WithCancel returns a copy of parent that is cancelled with the loss as its
// cause.
func (l *Lease) WithCancel(parent context.Context) (context.Context, context.CancelFunc) {
	if t := typeWord(parent); t == backgroundType || t == todoType {
		// A parent that carries nothing: the context is a child of a lease
		// context, made by package context, which costs what
		// context.WithCancel costs and nothing more. The loss cancels the
		// lease's contexts, and context cancels their children with the
		// cause.
		if ctx := l.context(); ctx != nil {
			return context.WithCancel(ctx)
		}
		// Ended: the lease never cancels anything now.
		return context.WithCancel(parent)
	}
	ctx, cancel := context.WithCancelCause(parent)
	if ctx.Err() != nil {
		// The parent has ended: nothing to register.
		return ctx, func() { cancel(context.Canceled) }
	}
	sh, i, ok := l.addCtx(ctx, cancel)
	if !ok {
		if err := l.Err(); err != nil {
			cancel(err)
		}
		return ctx, func() { cancel(context.Canceled) }
	}
	return ctx, func() {
		sh.dropCtx(i, cancel)
		cancel(context.Canceled)
	}
}

// backgroundType and todoType are the first words of context.Background()
// and context.TODO() as a context.Context holds them: the itab, one per
// dynamic type and interface in a binary. Their dynamic types have size zero,
// so every value of one of them is the same value, and a parent with one of
// these words is Background or TODO: comparing the word is the whole
// comparison. Comparing the interfaces would call the runtime's equality
// func, a cost on every WithCancel.
var backgroundType, todoType = typeWord(context.Background()), typeWord(context.TODO())

// typeWord returns the first word of ctx, the itab that names its dynamic type.
func typeWord(ctx context.Context) unsafe.Pointer {
	return (*[2]unsafe.Pointer)(unsafe.Pointer(&ctx))[0]
}

// context returns a lease context for a child made from Background: the
// registry's own, or once the registry has a set, that of the caller's
// shard, made if need be; nil once the lease is ended; once it is lost, a
// context already cancelled with the loss. Once made, a lease context is
// found without a lock: a loss that takes the registry off after the load
// cancels it, and after an end it is never cancelled, as an ended lease
// requires.
//
// Children of one lease context take its mutex inside package context, which
// this package cannot try, so the sign of contention here is a child made on
// another core than the one that made the registry's own lease context:
// from then on the registry has a set.
func (l *Lease) context() context.Context {
	if r := l.regs.load(); r != nil {
		if set := r.set.load(); set != nil {
			sh := set.pick()
			if lc := sh.ctx.load(); lc != nil {
				return lc.ctx
			}
			return l.shardContext(sh)
		}
		// The registry's own context is taken only from a live lease: a
		// registry made during a loss, by a registration that found the
		// lease live under the mutex after a Lose that found no registry,
		// is in regs until that registration takes it off, and its context
		// is live until then, after that Lose returned. The slow path
		// waits for the mutex and finds the loss. A set is only ever on a
		// registry that the Lose takes off itself (see lockShard).
		if lc := r.ctx.load(); lc != nil && lc.p == procHint() && l.state.load() == stateLive {
			return lc.ctx
		}
	}
	l.mu.Lock()
	switch l.state.load() {
	case stateLive:
		r, made := l.registry()
		lc := r.ctx.load()
		if lc == nil {
			lc = r.leaseContext()
		} else {
			// Made on another core: this child is lc's, the next ones
			// their shard's.
			r.spread(false)
		}
		if !l.unlockRegistered(made) {
			return nil
		}
		return lc.ctx
	case stateEnded:
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	return lostContext(l.awaitLoss())
}

// shardContext returns sh's lease context, made if need be, as context does.
func (l *Lease) shardContext(sh *shard) context.Context {
	sh.lock.Lock()
	switch l.state.load() {
	case stateLive:
		lc := sh.leaseContext()
		sh.lock.Unlock()
		return lc.ctx
	case stateEnded:
		sh.lock.Unlock()
		return nil
	}
	sh.lock.Unlock()
	return lostContext(l.awaitLoss())
}

// lostContext returns a context cancelled with err.
func lostContext(err *lost.Error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(err)
	return ctx
}

// addCtx records ctx, made from a parent other than Background, with the
// func that cancels it, and returns the shard and the index where it put it;
// it reports false when the lease is not live.
func (l *Lease) addCtx(ctx context.Context, cancel context.CancelCauseFunc) (*shard, int, bool) {
	sh, own, made := l.lockShard()
	if sh == nil {
		return nil, 0, false
	}
	if len(sh.ctxs) >= sh.limit {
		sh.compactCtxs()
	}
	sh.ctxs = append(sh.ctxs, ctxEntry{ctx, cancel})
	i := len(sh.ctxs) - 1 // read under the lock, before unlockShard lets go of it
	return sh, i, l.unlockShard(sh, own, made)
}

// compactCtxs drops the entries of sh.ctxs whose context is done or whose
// cancel emptied them, keeping the others in their order, and sets the limit
// of the next compaction to twice the entries kept (at least 1), so that the
// appends before it number at least half the entries it will look at. It
// makes a new slice when the kept entries would not fit under the new limit
// or would use less than half of it, so the slice's capacity stays at most
// twice the limit. It runs with sh's lock held.
func (sh *shard) compactCtxs() {
	sh.looks += len(sh.ctxs)
	kept := sh.ctxs[:0]
	for _, e := range sh.ctxs {
		if e.cancel != nil && e.ctx.Err() == nil {
			kept = append(kept, e)
		}
	}
	clear(sh.ctxs[len(kept):]) // what the dropped entries held is garbage now
	sh.limit = max(2*len(kept), 1)
	if c := cap(kept); c < sh.limit || c > 2*sh.limit {
		kept = append(make([]ctxEntry, 0, sh.limit), kept...)
	}
	sh.ctxs = kept
}

// dropCtx takes the entry whose cancel func is cancel off sh if it is still
// at i: off the end of the slice if it is the last, with any emptied entries
// before it, or else emptied in place until the next compaction, which moves
// entries and so may have moved it (then its context, cancelled by the
// caller, is done, and the next compaction drops it). After a loss or an
// end took sh's entries, there is nothing at i. The entry is known by its
// cancel func, so that the func the holder keeps captures one word less
// than the context would take.
func (sh *shard) dropCtx(i int, cancel context.CancelCauseFunc) {
	sh.lock.Lock()
	if i < len(sh.ctxs) && sameFunc(sh.ctxs[i].cancel, cancel) {
		sh.ctxs[i] = ctxEntry{}
		n := len(sh.ctxs)
		for n > 0 && sh.ctxs[n-1].cancel == nil {
			n--
		}
		sh.ctxs = sh.ctxs[:n]
	}
	sh.lock.Unlock()
}

// sameFunc reports whether f and g are one func value: a func value is a
// pointer to its closure, and context.WithCancelCause makes a new closure
// for every context.
func sameFunc(f, g context.CancelCauseFunc) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&f)) == *(*unsafe.Pointer)(unsafe.Pointer(&g))
}

// add links w in and reports true while the lease is live, or reports false.
func (l *Lease) add(w *waiter) bool {
	sh, own, made := l.lockShard()
	if sh == nil {
		return false
	}
	w.next = sh.waiters
	if w.next != nil {
		w.next.prev = w
	}
	sh.waiters = w
	w.sh.store(sh)
	return l.unlockShard(sh, own, made)
}

// stop unlinks w and reports whether this call kept it from firing. The
// shard w was linked in is read before its lock is taken: a waiter is
// linked in one shard, once, and never moves, so under that lock, with the
// lease live (no loss or end has taken the shard's waiters) and something
// to call (no stop has unlinked it), w is still there.
func (w *waiter) stop() bool {
	l := w.lease
	if sh := w.sh.load(); sh != nil {
		sh.lock.Lock()
		if l.state.load() == stateLive && (w.f != nil || w.lose != nil) {
			if w.prev != nil {
				w.prev.next = w.next
			} else {
				sh.waiters = w.next
			}
			if w.next != nil {
				w.next.prev = w.prev
			}
			w.unlink()
			sh.lock.Unlock()
			return true
		}
		sh.lock.Unlock()
	}
	// A stop that reports false because of a loss under way finds the loss
	// complete, as one made after that Lose returned.
	if l.state.load() == stateLosing {
		l.awaitLoss()
	}
	return false
}

func stopped() bool { return false }

// String returns kind, the subject and the state, for logs:
// signal.Signal("orders", lost: the coordinator refused the claim).
func (l *Lease) String(kind string) string {
	s := kind + "(" + strconv.Quote(l.Subject())
	switch l.state.load() {
	case stateLosing, stateLost:
		if cause := l.awaitLoss().Unwrap(); cause != nil {
			return s + ", lost: " + cause.Error() + ")"
		}
		return s + ", lost)"
	case stateEnded:
		return s + ", ended)"
	}
	return s + ", live)"
}

// KeepsRegistry reports whether l still holds a registry, which the loss or
// the end takes off whole; it counts the lease's own context, which
// Registrations does not. Tests use it to show what an ended lease keeps.
func (l *Lease) KeepsRegistry() bool { return l.regs.load() != nil }

// Registrations returns how many registrations l keeps: callbacks, merged
// leases and contexts, counting a context made from Background (a child of
// a lease context) as none. Tests use it to show what a lease holds.
func (l *Lease) Registrations() int {
	n := 0
	l.eachShard(func(sh *shard) {
		n += len(sh.ctxs)
		for w := sh.waiters; w != nil; w = w.next {
			n++
		}
	})
	return n
}

// ContextSlots returns the capacity of l's slices of contexts made from
// parents other than Background, summed over its shards, and how many
// entries their compactions have looked at. Tests use them to check the
// bound argued in docs/design.md.
func (l *Lease) ContextSlots() (capacity, looks int) {
	l.eachShard(func(sh *shard) {
		capacity += cap(sh.ctxs)
		looks += sh.looks
	})
	return capacity, looks
}

// Shards returns how many shards l's registry has: 0 without a registry,
// 1 for its own shard alone, and 1 more for each shard of its set.
func (l *Lease) Shards() int {
	n := 0
	l.eachShard(func(*shard) { n++ })
	return n
}

// Spread gives l's registry its set of shards now, as the first contention
// would, if l is live; the registration that makes the registry is an
// AfterLoss callback, stopped at once. Tests use it to run on the set the
// checks that contention makes hard to aim at.
func (l *Lease) Spread() {
	stop := l.AfterLoss(func() {})
	l.mu.Lock()
	if r := l.regs.load(); r != nil && l.state.load() == stateLive {
		r.spread(true)
	}
	l.mu.Unlock()
	stop()
}

// eachShard calls f with each shard of l's registry under its lock.
func (l *Lease) eachShard(f func(*shard)) {
	l.mu.Lock()
	r := l.regs.load()
	if r == nil {
		l.mu.Unlock()
		return
	}
	f(&r.shard)
	l.mu.Unlock()
	if set := r.set.load(); set != nil {
		for i := range set.shards {
			sh := &set.shards[i]
			sh.mu.Lock()
			f(&sh.shard)
			sh.mu.Unlock()
		}
	}
}
