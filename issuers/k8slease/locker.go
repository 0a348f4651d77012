package k8slease

import (
	"context"
	"errors"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/zukhruf/lease"
)

// Locker takes leases on subjects through one client with one Config; it
// implements lease.TryLocker. A subject is the name of a Lease object in the
// Locker's namespace, and the Locker is one candidate: every lease it takes
// records its identity.
//
// The zero Locker has no clientset and refuses every Lock; make one with
// [NewLocker]. A Locker is safe for use by many goroutines at once, and must
// not be copied after first use.
type Locker struct {
	cs        kubernetes.Interface
	namespace string
	identity  string
	cfg       Config

	mu sync.Mutex
	// seen keeps, by name, the record that a TryLock last found held by
	// another and when that version was first seen, so that a later
	// TryLock takes a record left unchanged for its lease duration over,
	// as a waiting Lock would. Forgetting an entry only makes a later
	// TryLock count from its own sight again, so the map is capped.
	seen map[string]observation
}

// seenMax caps the records a Locker remembers for TryLock.
const seenMax = 1024

var (
	_ lease.TryLocker = (*Locker)(nil)
	_ lease.Lease     = (*Lease)(nil)
)

// NewLocker returns a Locker that takes the Lease objects of namespace
// through cs as the candidate identity, each kept by cfg. It checks nothing:
// Lock and TryLock refuse a mistake in its arguments as [Config.Lock] does.
// identity must be unique among the candidates of a subject, other Lockers
// and client-go's included; two leases of one Locker on one subject still
// exclude each other.
func NewLocker(cs kubernetes.Interface, namespace, identity string, cfg Config) *Locker {
	return &Locker{cs: cs, namespace: namespace, identity: identity, cfg: cfg}
}

// Lock waits until the Locker holds the Lease object named subject, and
// returns its lease, as [Config.Lock] does; the signal's subject, and that of
// its lost.Error, is subject itself. A subject that is not a valid Lease name
// (a lower-case RFC 1123 subdomain of at most 253 characters) is refused at
// once with an error that names it, as is the empty one. Lock panics if ctx
// is nil.
func (l *Locker) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	if ctx == nil {
		panic("k8slease: Lock called with a nil context")
	}
	if subject == "" {
		return nil, errors.New("k8slease: Lock: the empty subject")
	}
	ls, err := l.cfg.lock(ctx, l.cs, l.namespace, subject, l.identity, claim{call: "lock", subject: subject})
	if err != nil {
		return nil, err // a nil interface, not a nil *Lease
	}
	return ls, nil
}

// TryLock takes the Lease object named subject as Lock does, in one attempt
// of the same grant: it creates the Lease, or takes it over if its record
// names no holder, or names one whose record this Locker has seen unchanged
// for the record's lease duration. If the record names a holder whose lease
// is current, another candidate's or one of this Locker's own leases, it
// returns an error wrapping [lease.ErrHeld] that describes the record, and
// leaves nothing behind. It does not wait for a release; a failure that may
// heal, or a conflict with another write, is retried as in Lock, until ctx
// ends. An attempt costs the apiserver what a round of Lock does: a read,
// and the write if the Lease is free; and the clientset's watch opened and
// stopped, unless another lease or Lock of its namespace keeps it open. TryLock
// panics if ctx is nil.
func (l *Locker) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	if ctx == nil {
		panic("k8slease: TryLock called with a nil context")
	}
	if subject == "" {
		return nil, errors.New("k8slease: TryLock: the empty subject")
	}
	l.mu.Lock()
	seen := l.seen[subject]
	l.mu.Unlock()
	ls, err := l.cfg.lock(ctx, l.cs, l.namespace, subject, l.identity, claim{call: "trylock", subject: subject, try: &seen})
	l.remember(subject, seen, errors.Is(err, lease.ErrHeld))
	if err != nil {
		return nil, err
	}
	return ls, nil
}

// remember keeps what a TryLock of subject saw if it found the Lease held,
// and forgets it otherwise.
func (l *Locker) remember(subject string, seen observation, held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !held {
		delete(l.seen, subject)
		return
	}
	if l.seen == nil {
		l.seen = make(map[string]observation)
	}
	if _, ok := l.seen[subject]; !ok && len(l.seen) >= seenMax {
		for name := range l.seen {
			delete(l.seen, name)
			break
		}
	}
	l.seen[subject] = seen
}
