package signal

import "github.com/zukhruf/lease/internal/core"

// Any returns a signal that is lost as soon as any of sigs is lost, with the
// very *lost.Error that signal reports: the first loss wins, and later
// losses of the other signals change nothing. A holder that works under
// several leases at once, such as the lock of a key and the leadership of
// its shard, checks and waits on the one merged signal.
//
// "As soon as" is in the order of Lose: the source's own Err and Done show
// its loss first, and its Lose then loses the merged signal before it
// returns (see controller.Controller.Lose).
//
// If some of sigs are already lost, the merged signal is lost at once, with
// the error of the first of them in the order given. A signal whose lease
// was released never loses the merged one. Any of no signal returns a signal
// that is never lost; Any of one returns a new signal that follows it.
//
// The merged signal holds one registration on each of sigs. Calling release
// ends the merged signal, as a release ends a lease: it is never lost after
// that, its AfterLoss callbacks are dropped and its contexts are never
// cancelled by a loss; and it takes the registrations off sigs, so that a
// long-lived signal does not keep merged signals that are no longer used.
// The registrations also go when the merged signal is lost, and each one
// when its signal's lease is released. As with [context.WithCancel], call
// release as soon as the work done under the merged signal is complete;
// until then, or until one of sigs is lost, every live one of sigs keeps the
// merged signal in memory. Calls to release after the first do nothing;
// after a loss, release keeps the loss. A release that races the loss of a
// source may end the merged signal first, and then it is never lost: a
// holder that must know whether a source was lost checks that source.
//
// The merged signal's String lists the subjects of sigs; its Err names the
// subject of the signal that was lost.
//
// Any panics if an element of sigs is nil.
func Any(sigs ...*Signal) (s *Signal, release func()) {
	for _, sig := range sigs {
		if sig == nil {
			panic("signal: Any called with a nil *Signal")
		}
	}
	l, release := core.Any(len(sigs), func(i int) *core.Lease { return sigs[i].lease() })
	return fromLease(l), release
}
