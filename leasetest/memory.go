package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

// Memory is an in-memory [lease.TryLocker] for tests: mutual exclusion
// within the process, fencing tokens, waiting Locks, and the controls a test
// of a holder needs: [Memory.Lose] takes a subject's lease away with a cause,
// [Memory.FailNext] makes the next Lock fail, [Memory.Pause] keeps Locks of
// a subject waiting until the test resumes them.
//
// Its tokens grow by one at each grant, over all subjects, from 1. It passes
// the conformance suite of [Run].
//
// The zero Memory is ready to use. A Memory must not be copied after first
// use.
type Memory struct {
	mu       sync.Mutex
	subjects map[string]*subjectState
	token    int64
	failNext []error
}

// subjectState is one subject's holder and the Locks that wait on it.
type subjectState struct {
	holder  *memoryLease
	paused  int
	waiting int
	// changed is closed, and replaced, when the holder leaves or a pause
	// ends, so that every waiting Lock looks again.
	changed chan struct{}
}

var _ lease.TryLocker = (*Memory)(nil)

// Lock waits until subject is free and not paused, then grants it. A Lock
// whose ctx ends first returns an error wrapping ctx's error and leaves
// nothing held. It refuses the empty subject.
func (m *Memory) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	return m.lock(ctx, "Lock", subject, true)
}

// TryLock grants subject if it is free and not paused, and otherwise
// returns an error wrapping [lease.ErrHeld] at once.
func (m *Memory) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	return m.lock(ctx, "TryLock", subject, false)
}

func (m *Memory) lock(ctx context.Context, call, subject string, wait bool) (lease.Lease, error) {
	if ctx == nil {
		panic("leasetest: Memory." + call + " called with a nil context")
	}
	if subject == "" {
		return nil, errors.New("leasetest: " + call + ": the empty subject")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.failNext) > 0 {
		err := m.failNext[0]
		m.failNext = m.failNext[1:]
		return nil, err
	}
	s := m.subject(subject)
	for s.holder != nil || s.paused > 0 {
		if !wait {
			return nil, fmt.Errorf("leasetest: TryLock %q: %w", subject, lease.ErrHeld)
		}
		changed := s.changed
		s.waiting++
		m.mu.Unlock()
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-changed:
		}
		m.mu.Lock()
		s.waiting--
		if err != nil {
			return nil, fmt.Errorf("leasetest: Lock %q: %w", subject, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("leasetest: %s %q: %w", call, subject, err)
	}
	m.token++
	l := &memoryLease{m: m, state: s, token: m.token, ctrl: controller.New(subject)}
	s.holder = l
	return l, nil
}

// subject returns subject's state, made on first use; m.mu is held.
func (m *Memory) subject(subject string) *subjectState {
	if m.subjects == nil {
		m.subjects = make(map[string]*subjectState)
	}
	s := m.subjects[subject]
	if s == nil {
		s = &subjectState{changed: make(chan struct{})}
		m.subjects[subject] = s
	}
	return s
}

// wake tells s's waiting Locks to look again; m.mu is held.
func (s *subjectState) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Lose loses the lease held on subject with cause, as a coordinator that
// took it away would, and frees the subject for the next Lock. The holder's
// signal is lost before the subject is free. It reports whether a lease was
// held; a nil cause gives a [github.com/zukhruf/lease/lost.Error] that
// carries none.
func (m *Memory) Lose(subject string, cause error) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.subjects[subject]
	if s == nil || s.holder == nil {
		return false
	}
	s.holder.ctrl.Lose(cause)
	s.holder = nil
	s.wake()
	return true
}

// FailNext makes the next call of Lock or TryLock, on any subject, return
// err at once, as a coordinator that refused it would. Successive calls
// queue their errors in order.
func (m *Memory) FailNext(err error) {
	if err == nil {
		panic("leasetest: Memory.FailNext called with a nil error")
	}
	m.mu.Lock()
	m.failNext = append(m.failNext, err)
	m.mu.Unlock()
}

// Pause keeps every Lock of subject waiting, and every TryLock failing with
// [lease.ErrHeld], even while the subject is free, until resume is called:
// a test holds a Lock in its wait, then lets it go. Pauses nest; resume may
// be called more than once.
func (m *Memory) Pause(subject string) (resume func()) {
	m.mu.Lock()
	m.subject(subject).paused++
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			s := m.subjects[subject]
			s.paused--
			s.wake()
			m.mu.Unlock()
		})
	}
}

// Waiting returns how many Locks of subject are waiting now, so that a test
// can wait for its holder to be in Lock before it acts.
func (m *Memory) Waiting(subject string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.subjects[subject]; s != nil {
		return s.waiting
	}
	return 0
}

// memoryLease is a lease of a Memory.
type memoryLease struct {
	m     *Memory
	state *subjectState
	token int64
	ctrl  *controller.Controller
}

func (l *memoryLease) Signal() *signal.Signal { return l.ctrl.Signal() }
func (l *memoryLease) Token() int64           { return l.token }

// Unlock ends the signal and frees the subject; again, it does nothing.
func (l *memoryLease) Unlock(ctx context.Context) error {
	if ctx == nil {
		panic("leasetest: Unlock called with a nil context")
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	l.ctrl.End()
	if l.state.holder == l {
		l.state.holder = nil
		l.state.wake()
	}
	return nil
}
