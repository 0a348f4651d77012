package leasetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/lost"
)

// Harness is what [Run] needs of one coordinator.
type Harness struct {
	// NewLocker returns a Locker on a client of its own, as a second process
	// would have: two Lockers of one Harness share nothing but the
	// coordinator. It closes the client with t.Cleanup.
	NewLocker func(t *testing.T) lease.Locker

	// Revoke takes the lease held on subject away at the coordinator, as an
	// operator would (delete the key, terminate the backend, delete the
	// Lease object), and returns once the coordinator has done it.
	Revoke func(ctx context.Context, subject string) error

	// HandOver bounds the time from a holder's Unlock to a waiting Lock's
	// grant, and from Revoke to the holder's loss: the issuer's stated
	// hand-over time. Zero means 10 s.
	HandOver time.Duration

	// Rounds is how many times each of four goroutines takes the contended
	// subject in the mutual exclusion check. Zero means 5.
	Rounds int

	// Goroutines are goleak's options for goroutines the coordinator's
	// client leaves on purpose after its cleanup, such as a pool's reaper.
	Goroutines []goleak.Option
}

// Run checks h's Locker against the promise of [lease.Lease] and
// [lease.Locker], each check a subtest, on subjects of its own named
// "leasetest-<time>-<check>" (lower-case letters, digits and '-', which
// every coordinator takes). The Locker must implement [lease.TryLocker].
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewLocker == nil || h.Revoke == nil {
		panic("leasetest: Run called with a Harness without NewLocker or Revoke")
	}
	if h.HandOver == 0 {
		h.HandOver = 10 * time.Second
	}
	if h.Rounds == 0 {
		h.Rounds = 5
	}
	// Registered first, so run last: after every cleanup of the Lockers'
	// clients has closed them.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		if err := goleak.Find(append([]goleak.Option{before}, h.Goroutines...)...); err != nil {
			t.Errorf("leasetest: goroutines left after the suite's clients were closed: %v", err)
		}
	})
	s := &suite{h: h, prefix: fmt.Sprintf("leasetest-%d-", time.Now().UnixNano())}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"LockUnlock", s.lockUnlock},
		{"MutualExclusion", s.mutualExclusion},
		{"UnlockHandsOver", s.unlockHandsOver},
		{"RevokeLoses", s.revokeLoses},
		{"LockCutByContext", s.lockCutByContext},
		{"UnlockTwice", s.unlockTwice},
		{"LockAfterUnlock", s.lockAfterUnlock},
		{"TryLock", s.tryLock},
		{"Subjects", s.subjects},
	} {
		t.Run(c.name, c.run)
	}
}

type suite struct {
	h      Harness
	prefix string
}

// subject names a subject of the check t runs.
func (s *suite) subject(t *testing.T, suffix string) string {
	name := t.Name()[strings.LastIndex(t.Name(), "/")+1:]
	return s.prefix + strings.ToLower(name) + suffix
}

// context returns a context that ends well after any step of a working
// issuer, so that a broken one fails the check rather than hangs it.
func (s *suite) context(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 6*s.h.HandOver)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) locker(t *testing.T) lease.Locker {
	t.Helper()
	l := s.h.NewLocker(t)
	if l == nil {
		t.Fatal("Harness.NewLocker returned nil")
	}
	return l
}

func (s *suite) tryLocker(t *testing.T) lease.TryLocker {
	t.Helper()
	l := s.locker(t)
	tl, ok := l.(lease.TryLocker)
	if !ok {
		t.Fatalf("%T does not implement lease.TryLocker", l)
	}
	return tl
}

func mustLock(t *testing.T, ctx context.Context, l lease.Locker, subject string) lease.Lease {
	t.Helper()
	ls, err := l.Lock(ctx, subject)
	if err != nil {
		t.Fatalf("Lock(%.60q) = %v", subject, err)
	}
	if ls == nil {
		t.Fatalf("Lock(%.60q) returned a nil Lease and no error", subject)
	}
	return ls
}

func mustUnlock(t *testing.T, ctx context.Context, ls lease.Lease) {
	t.Helper()
	if err := ls.Unlock(ctx); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
}

// wantLive fails t unless ls's signal is neither lost nor closed.
func wantLive(t *testing.T, what string, ls lease.Lease) {
	t.Helper()
	if err := ls.Signal().Err(); err != nil {
		t.Errorf("%s: Err() = %v, want nil", what, err)
	}
	select {
	case <-ls.Signal().Done():
		t.Errorf("%s: Done() is closed, want open", what)
	default:
	}
}

// wantHeld fails t unless a TryLock of subject by l is refused with
// lease.ErrHeld.
func wantHeld(t *testing.T, ctx context.Context, l lease.TryLocker, subject string) {
	t.Helper()
	ls, err := l.TryLock(ctx, subject)
	if !errors.Is(err, lease.ErrHeld) {
		t.Errorf("TryLock(%.60q) of a held subject = %v, want an error wrapping lease.ErrHeld", subject, err)
	}
	if ls != nil {
		t.Errorf("TryLock(%.60q) of a held subject granted a lease", subject)
		_ = ls.Unlock(ctx)
	}
}

// wantFree fails t unless l takes subject by TryLock at once.
func wantFree(t *testing.T, ctx context.Context, l lease.TryLocker, subject, why string) {
	t.Helper()
	ls, err := l.TryLock(ctx, subject)
	if err != nil {
		t.Errorf("TryLock(%.60q) %s = %v, want a lease", subject, why, err)
		return
	}
	mustUnlock(t, ctx, ls)
}

// lockUnlock: a lease is live while held and ended, never lost, after Unlock.
func (s *suite) lockUnlock(t *testing.T) {
	ctx := s.context(t)
	subject := s.subject(t, "")
	ls := mustLock(t, ctx, s.locker(t), subject)
	if first, again := ls.Signal(), ls.Signal(); first != again {
		t.Error("successive calls of Signal() return different signals")
	}
	wantLive(t, "held", ls)
	mustUnlock(t, ctx, ls)
	wantLive(t, "after Unlock", ls)
}

// mutualExclusion: four goroutines on two clients take one subject in
// turn; no grant finds another live holder, and each token is above the
// last.
func (s *suite) mutualExclusion(t *testing.T) {
	ctx := s.context(t)
	subject := s.subject(t, "")
	lockers := []lease.Locker{s.locker(t), s.locker(t)}
	var (
		mu        sync.Mutex
		holder    lease.Lease
		lastToken int64
		grants    int
		overlaps  atomic.Int32
	)
	var wg sync.WaitGroup
	for g := range 4 {
		l := lockers[g%2]
		wg.Go(func() {
			for range s.h.Rounds {
				ls, err := l.Lock(ctx, subject)
				if err != nil {
					t.Errorf("Lock(%.60q) = %v", subject, err)
					return
				}
				mu.Lock()
				if holder != nil && holder.Signal().Err() == nil {
					overlaps.Add(1)
					t.Errorf("Lock granted token %d while token %d was held and live", ls.Token(), holder.Token())
				}
				if grants > 0 && ls.Token() <= lastToken {
					t.Errorf("grant %d: Token() = %d, want above the last holder's %d", grants+1, ls.Token(), lastToken)
				}
				holder, lastToken = ls, ls.Token()
				grants++
				mu.Unlock()

				// Hold it a little, so that a second grant overlaps it.
				time.Sleep(time.Millisecond)
				if err := ls.Signal().Err(); err != nil {
					t.Errorf("held lease: Err() = %v, want nil", err)
				}

				mu.Lock()
				holder = nil
				mu.Unlock()
				if err := ls.Unlock(ctx); err != nil {
					t.Errorf("Unlock() = %v", err)
				}
				if err := ls.Signal().Err(); err != nil {
					t.Errorf("after Unlock: Err() = %v, want nil", err)
				}
			}
		})
	}
	wg.Wait()
	if want := 4 * s.h.Rounds; grants != want && !t.Failed() {
		t.Errorf("%d grants, want %d", grants, want)
	}
}

// unlockHandsOver: a Lock waiting on another client's lease is granted
// within HandOver of the Unlock, and the released lease is not lost.
func (s *suite) unlockHandsOver(t *testing.T) {
	ctx := s.context(t)
	subject := s.subject(t, "")
	a := mustLock(t, ctx, s.locker(t), subject)
	b := s.locker(t)
	type result struct {
		ls  lease.Lease
		err error
		at  time.Time
	}
	granted := make(chan result, 1)
	go func() {
		ls, err := b.Lock(ctx, subject)
		granted <- result{ls, err, time.Now()}
	}()
	// The waiter needs time to reach its wait; if it has not, the figure
	// below only grows by its start, and the check is still sound.
	select {
	case r := <-granted:
		t.Fatalf("Lock(%.60q) of a held subject returned (%v, %v) before the holder's Unlock", subject, r.ls, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	unlocked := time.Now()
	mustUnlock(t, ctx, a)
	wantLive(t, "after Unlock", a)
	select {
	case r := <-granted:
		if r.err != nil {
			t.Fatalf("waiting Lock(%.60q) = %v", subject, r.err)
		}
		if a.Signal().Err() != nil {
			t.Errorf("the released lease was lost: %v", a.Signal().Err())
		}
		if r.ls.Token() <= a.Token() {
			t.Errorf("waiter's Token() = %d, want above the released lease's %d", r.ls.Token(), a.Token())
		}
		t.Logf("hand-over: the waiter was granted %v after Unlock began", r.at.Sub(unlocked))
		mustUnlock(t, ctx, r.ls)
	case <-time.After(s.h.HandOver):
		t.Fatalf("the waiting Lock(%.60q) was not granted within HandOver (%v) of the holder's Unlock", subject, s.h.HandOver)
	}
}

// revokeLoses: the coordinator's revocation loses the holder's signal with
// a *lost.Error naming the subject, and frees the subject.
func (s *suite) revokeLoses(t *testing.T) {
	ctx := s.context(t)
	subject := s.subject(t, "")
	l := s.tryLocker(t)
	ls := mustLock(t, ctx, l, subject)
	if err := s.h.Revoke(ctx, subject); err != nil {
		t.Fatalf("Revoke(%.60q) = %v", subject, err)
	}
	select {
	case <-ls.Signal().Done():
	case <-time.After(s.h.HandOver):
		t.Fatalf("the signal was not lost within HandOver (%v) of the revocation", s.h.HandOver)
	}
	var le *lost.Error
	if err := ls.Signal().Err(); !errors.As(err, &le) {
		t.Fatalf("after the revocation: Err() = %v (%T), want a *lost.Error", err, err)
	}
	if le.Subject() != subject {
		t.Errorf("lost.Error.Subject() = %q, want %q", le.Subject(), subject)
	}
	// Whatever Unlock says of a lost lease, it must not make the signal
	// live again, nor leave the subject held.
	_ = ls.Unlock(ctx)
	if ls.Signal().Err() == nil {
		t.Error("Unlock of a lost lease made its signal live again")
	}
	next := mustLock(t, ctx, s.locker(t), subject)
	mustUnlock(t, ctx, next)
}

// lockCutByContext: a waiting Lock whose context ends returns the context's
// error, and leaves nothing held once the holder lets go.
func (s *suite) lockCutByContext(t *testing.T) {
	ctx := s.context(t)
	subject := s.subject(t, "")
	l := s.tryLocker(t)
	a := mustLock(t, ctx, l, subject)
	other := s.tryLocker(t)

	cut, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	ls, err := other.Lock(cut, subject)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock(%.60q) cut by its deadline = %v, want an error wrapping context.DeadlineExceeded", subject, err)
	}
	if ls != nil {
		t.Errorf("Lock(%.60q) cut by its deadline returned a lease", subject)
	}

	cut, cancel = context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		ls, err := other.Lock(cut, subject)
		if ls != nil {
			_ = ls.Unlock(ctx)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Lock(%.60q) cut by cancel = %v, want an error wrapping context.Canceled", subject, err)
	}

	wantLive(t, "the holder, after the cut Locks", a)
	mustUnlock(t, ctx, a)
	// Neither cut Lock may have left a claim that is granted later.
	wantFree(t, ctx, other, subject, "after the holder's Unlock, with the cut Locks' client")
	wantFree(t, ctx, l, subject, "after the holder's Unlock")
}

// unlockTwice: a second Unlock returns what the first did and never
// releases the next holder's lease.
func (s *suite) unlockTwice(t *testing.T) {
	ctx := s.context(t)
	subject := s.subject(t, "")
	l := s.tryLocker(t)
	a := mustLock(t, ctx, l, subject)
	first := a.Unlock(ctx)
	if first != nil {
		t.Fatalf("Unlock() = %v", first)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Errorf("second Unlock() = %v, want the first's nil", err)
	}
	wantLive(t, "after two Unlocks", a)

	other := s.tryLocker(t)
	b := mustLock(t, ctx, other, subject)
	_ = a.Unlock(ctx)
	wantLive(t, "the next holder, after the first's third Unlock", b)
	wantHeld(t, ctx, l, subject)
	mustUnlock(t, ctx, b)
}

// lockAfterUnlock: one client takes a subject again after releasing it, with
// a larger token.
func (s *suite) lockAfterUnlock(t *testing.T) {
	ctx := s.context(t)
	subject := s.subject(t, "")
	l := s.locker(t)
	a := mustLock(t, ctx, l, subject)
	mustUnlock(t, ctx, a)
	b := mustLock(t, ctx, l, subject)
	if b.Token() <= a.Token() {
		t.Errorf("second grant's Token() = %d, want above the first's %d", b.Token(), a.Token())
	}
	wantLive(t, "the second lease", b)
	mustUnlock(t, ctx, b)
}

// tryLock: TryLock of a held subject fails at once with lease.ErrHeld, from
// another client and from the holder's own; of a free one, it grants.
func (s *suite) tryLock(t *testing.T) {
	ctx := s.context(t)
	subject := s.subject(t, "")
	l, other := s.tryLocker(t), s.tryLocker(t)
	a, err := l.TryLock(ctx, subject)
	if err != nil {
		t.Fatalf("TryLock(%.60q) of a free subject = %v", subject, err)
	}
	wantLive(t, "granted by TryLock", a)
	wantHeld(t, ctx, other, subject)
	wantHeld(t, ctx, l, subject)
	wantLive(t, "the holder, after refused TryLocks", a)
	mustUnlock(t, ctx, a)
	b, err := other.TryLock(ctx, subject)
	if err != nil {
		t.Fatalf("TryLock(%.60q) after the holder's Unlock = %v", subject, err)
	}
	if b.Token() <= a.Token() {
		t.Errorf("TryLock's Token() = %d, want above the last holder's %d", b.Token(), a.Token())
	}
	mustUnlock(t, ctx, b)
}

// subjects: the empty subject is refused at once; a long one and one not in
// ASCII are each either taken, exclusively, or refused at once.
func (s *suite) subjects(t *testing.T) {
	ctx := s.context(t)
	l, other := s.tryLocker(t), s.tryLocker(t)
	quick, cancel := context.WithTimeout(ctx, s.h.HandOver)
	defer cancel()
	if ls, err := l.Lock(quick, ""); err == nil || ls != nil {
		t.Errorf(`Lock("") = (%v, %v), want an error`, ls, err)
		if ls != nil {
			_ = ls.Unlock(ctx)
		}
	} else if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf(`Lock("") waited out its context, want it refused at once: %v`, err)
	}
	for _, subject := range []string{
		s.subject(t, "-"+strings.Repeat("long-", 200)),
		s.subject(t, "-ключ-鍵-🔒"),
	} {
		ls, err := l.Lock(quick, subject)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				t.Errorf("Lock(%.60q) waited out its context, want a lease or an error at once: %v", subject, err)
			}
			continue
		}
		wantLive(t, "edge subject", ls)
		wantHeld(t, ctx, other, subject)
		mustUnlock(t, ctx, ls)
		wantFree(t, ctx, other, subject, "after Unlock")
	}
}
