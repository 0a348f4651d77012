package s3lease

import "errors"

// The causes of a loss, and the store the probe refuses. A holder's
// [signal.Signal] reports a loss with a lost.Error that wraps one of the
// first three, itself wrapped with what the store said; match them with
// [errors.Is].
var (
	// ErrTakenOver reports that a renewal found the lock object changed
	// (412 Precondition Failed on its If-Match): another holder took it
	// over after its expiry by its own clock, or an operator overwrote it.
	ErrTakenOver = errors.New("s3lease: the coordinator refused the claim: lock object changed")

	// ErrDeleted reports that a renewal found the lock object gone: an
	// operator, a lifecycle rule or a bucket emptied by hand deleted it.
	ErrDeleted = errors.New("s3lease: the coordinator refused the claim: lock object deleted")

	// ErrRenewalUnconfirmed reports that the local deadline came before a
	// renewal that would move it was confirmed: the store did not answer
	// in time. From then on a waiter may judge the lock object expired.
	// Its text names the last confirmed write and the deadline (see
	// [Config.ClockSkew]).
	ErrRenewalUnconfirmed = errors.New("s3lease: renewal unconfirmed")

	// ErrUnsafeStore reports that the store failed the probe that Lock
	// runs once per client and bucket: it ignores If-None-Match or
	// If-Match on PutObject, or let more than one of 32 concurrent
	// conditional PUTs succeed. No lease can be kept on such a store; the
	// error names the store and what it did.
	ErrUnsafeStore = errors.New("s3lease: the store does not honour conditional writes")
)
