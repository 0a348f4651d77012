// Package handrolled is the signal people write by hand today: a mutex, an
// error and a channel made up front. It is a peer in the benchmarks, written
// the plain way, not tuned.
package handrolled

import "sync"

// Signal is a hand-rolled loss signal. Use New; the zero Signal has no
// channel.
type Signal struct {
	mu    sync.Mutex
	err   error
	ended bool
	done  chan struct{}
}

// New returns a live signal with its Done channel made.
func New() *Signal { return &Signal{done: make(chan struct{})} }

// Err returns nil while the signal is live or ended, and the cause once lost.
func (s *Signal) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Done returns the channel that Lose closes.
func (s *Signal) Done() <-chan struct{} { return s.done }

// Lose records cause and closes Done, once, unless the signal was ended; it
// reports whether this call lost it. The cause is kept as it is, unwrapped,
// as hand-rolled signals usually do.
func (s *Signal) Lose(cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.ended {
		return false
	}
	s.err = cause
	close(s.done)
	return true
}

// End ends a live signal and reports whether this call ended it.
func (s *Signal) End() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.ended {
		return false
	}
	s.ended = true
	return true
}
