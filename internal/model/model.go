// Package model is the sequential specification of a lease: what each call
// returns and how it moves the lease, with no concurrency and no channels.
// The property tests run the real lease beside it step by step, and the
// linearizability tests check concurrent histories against it.
package model

// Phase is where a lease stands. It moves from Live to Lost or to Ended, once.
type Phase uint8

const (
	Live Phase = iota
	Lost
	Ended
)

func (p Phase) String() string {
	switch p {
	case Live:
		return "live"
	case Lost:
		return "lost"
	case Ended:
		return "ended"
	}
	return "Phase(?)"
}

// Cause names an issuer's cause by number; NoCause stands for Lose(nil).
type Cause int

const NoCause Cause = 0

// Callback is what became of one AfterLoss registration. A context made by
// Signal.Context is a registration too, with the same fates: Started is its
// cancellation by the loss, Stopped its own cancel before the loss.
type Callback uint8

const (
	Pending Callback = iota // registered, waiting for the loss
	Started                 // the loss started it (or it was registered after the loss)
	Stopped                 // stop kept it from running
	Dropped                 // the lease ended first: it will never run
)

func (c Callback) String() string {
	return [...]string{"pending", "started", "stopped", "dropped"}[c]
}

// Lease is the specification's state of one lease. The zero Lease is live.
type Lease struct {
	Phase     Phase
	Cause     Cause      // the cause of the loss, when Phase is Lost
	Callbacks []Callback // one per AfterLoss, in the order of registration
}

// Clone returns a copy that shares nothing with l.
func (l Lease) Clone() Lease {
	l.Callbacks = append([]Callback(nil), l.Callbacks...)
	return l
}

// Lose loses a live lease with cause and reports whether it did: the first
// loss wins, and an ended lease cannot be lost.
func (l *Lease) Lose(cause Cause) bool {
	if l.Phase != Live {
		return false
	}
	l.Phase, l.Cause = Lost, cause
	l.settle(Pending, Started)
	return true
}

// End ends a live lease and reports whether it did; it keeps an earlier loss.
func (l *Lease) End() bool {
	if l.Phase != Live {
		return false
	}
	l.Phase = Ended
	l.settle(Pending, Dropped)
	return true
}

// Err reports whether the lease is lost and with what cause.
func (l *Lease) Err() (lost bool, cause Cause) {
	return l.Phase == Lost, l.Cause
}

// DoneClosed reports whether the Done channel is closed: only after a loss.
func (l *Lease) DoneClosed() bool { return l.Phase == Lost }

// AfterLoss registers a callback and returns its number. On a lost lease it
// starts at once; on an ended lease it is dropped at once.
func (l *Lease) AfterLoss() int {
	c := Pending
	switch l.Phase {
	case Lost:
		c = Started
	case Ended:
		c = Dropped
	}
	l.Callbacks = append(l.Callbacks, c)
	return len(l.Callbacks) - 1
}

// Stop stops callback id and reports whether it kept it from running.
func (l *Lease) Stop(id int) bool {
	if l.Callbacks[id] != Pending {
		return false
	}
	l.Callbacks[id] = Stopped
	return true
}

func (l *Lease) settle(from, to Callback) {
	for i, c := range l.Callbacks {
		if c == from {
			l.Callbacks[i] = to
		}
	}
}
