package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease"
)

// Locker takes leases on subjects through one session with one set of
// Options; it implements [lease.TryLocker]. A subject is the name of an etcd
// lock, taken by the recipe of [concurrency.Mutex] as [Lock] takes it, and
// the signal's subject.
//
// A session's key for a lock is the lock's name and the session's etcd
// lease, so etcd's mutex gives a session that locks a name twice the same
// claim. A Locker does not: the leases that Lockers of one session take on
// one subject in this process take turns, in the order their calls came,
// and a TryLock of a subject that such a lease holds is refused at once. A
// lease gives up its turn when it is lost or after its release. Leases of
// [Lock] on the same session and name are not in those turns.
//
// A Locker is made by [NewLocker]; the zero Locker has no session, and its
// Lock and TryLock panic as Lock does with a nil session. A Locker is
// immutable, and safe for use by many goroutines at once.
type Locker struct {
	s    *concurrency.Session
	opts []Option
}

var (
	_ lease.TryLocker = (*Locker)(nil)
	_ lease.Lease     = (*Lease)(nil)
)

// NewLocker returns a Locker that takes leases through session s, each kept
// with opts as [Lock] keeps it. Lock and TryLock refuse an option out of
// range, as Lock does. NewLocker panics if s is nil or was not made by
// concurrency.NewSession.
func NewLocker(s *concurrency.Session, opts ...Option) *Locker {
	switch {
	case s == nil:
		panic("etcdlease: NewLocker called with a nil session")
	case s.Client() == nil:
		panic("etcdlease: NewLocker called with a session not made by concurrency.NewSession")
	}
	return &Locker{s: s, opts: slices.Clone(opts)}
}

// Lock waits until the Locker's session holds the etcd lock named subject,
// after the leases of the same session and subject before it in this
// process, and returns its lease, as [Lock] does. The empty subject is
// refused at once; etcd takes any other name whose keys fit in its requests,
// and refuses a longer one at once. Unlike Lock's, the lease's release
// deletes the key only if it is still the one the lease put, so it never
// releases a later holder. A Lock whose ctx ends returns an error wrapping
// ctx's error, and withdraws its turn and its key as Lock withdraws the key.
// Lock panics if ctx is nil.
func (l *Locker) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, subject, "Lock")
}

// TryLock takes the lease on subject as Lock does if no one holds the lock
// now, and otherwise returns an error wrapping [lease.ErrHeld] at once. It
// claims the lock in one transaction, as [concurrency.Mutex.TryLock] does:
// it puts the session's key and reads the lock's owner; if another key owns
// it, TryLock deletes its own key before it returns, so that no claim is
// left waiting. A lease of the same session and subject in this process
// refuses it without asking etcd. ctx bounds the call, as it bounds Lock's.
func (l *Locker) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	return l.lock(ctx, subject, "TryLock")
}

func (l *Locker) lock(ctx context.Context, subject, call string) (lease.Lease, error) {
	begun := time.Now()
	checkArgs(ctx, l.s, call)
	if subject == "" {
		return nil, errors.New("etcdlease: " + call + ": the empty subject")
	}
	try := call == "TryLock"
	what := "lock"
	if try {
		what = "try lock"
	}
	t, err := takeTurn(ctx, keyOf(l.s, subject), !try)
	if err != nil {
		return nil, fmt.Errorf("etcdlease: %s %s: %w", what, quote(subject), err)
	}
	sh, err := acquire(ctx, l.s, l.opts)
	if err != nil {
		t.free()
		return nil, fmt.Errorf("etcdlease: %s %s: %w", what, quote(subject), err)
	}
	c := newClaim(l.s, sh.r, subject)
	c.fresh = true
	wait := c.lock
	if try {
		wait = c.tryLock
	}
	if err := sh.r.bound(ctx, l.s, wait); err != nil {
		sh.release()
		t.free()
		return nil, fmt.Errorf("etcdlease: %s %s: %w", what, quote(subject), err)
	}
	// resign, not unlock: the release deletes the key only if it is still
	// the lease's, so a lease lost and released late never deletes the key
	// of the next lease in the turn.
	return start(sh, subject, c.key, c.rev, c.granted, c.resign, t.free, observe(l.opts, begun)), nil
}

// turns holds the turns of the etcd keys that Lockers' leases hold or wait
// for in this process.
var turns = struct {
	mu sync.Mutex
	m  map[string]*turn
}{m: make(map[string]*turn)}

// turn orders the leases that Lockers take on one etcd key in this process.
type turn struct {
	key  string
	held chan struct{} // has a value while a lease, or a call that may make one, has the turn
	refs int           // how many hold or wait for the turn; turns.mu guards it
}

// errHeldHere is the cause of a TryLock refused in the process.
var errHeldHere = fmt.Errorf("%w: by a lease of the same session in this process", lease.ErrHeld)

// takeTurn returns key's turn once it has it: waiting until ctx ends if
// wait, and otherwise returning an error wrapping lease.ErrHeld at once.
func takeTurn(ctx context.Context, key string, wait bool) (*turn, error) {
	turns.mu.Lock()
	t := turns.m[key]
	if t == nil {
		t = &turn{key: key, held: make(chan struct{}, 1)}
		turns.m[key] = t
	}
	t.refs++
	turns.mu.Unlock()
	var err error
	if wait {
		select {
		case t.held <- struct{}{}:
			return t, nil
		case <-ctx.Done():
			err = ctx.Err()
			if cause := context.Cause(ctx); cause != err {
				err = fmt.Errorf("%w: %w", cause, err)
			}
			err = fmt.Errorf("%w: a lease of the same session held the lock in this process", err)
		}
	} else {
		select {
		case t.held <- struct{}{}:
			return t, nil
		default:
			err = errHeldHere
		}
	}
	t.drop()
	return nil, err
}

// free gives up the turn; it is called once for each turn taken.
func (t *turn) free() {
	<-t.held
	t.drop()
}

func (t *turn) drop() {
	turns.mu.Lock()
	defer turns.mu.Unlock()
	if t.refs--; t.refs == 0 {
		delete(turns.m, t.key)
	}
}
