package redislease

import "errors"

// The causes of a loss. A holder's [signal.Signal] reports a loss with a
// lost.Error that wraps one of these, itself wrapped with what Redis said
// (the value found in the key, its expiry, the replicas that acknowledged a
// renewal); match them with [errors.Is].
var (
	// ErrTakenOver reports that the key holds another value than this
	// lease's: another client wrote it (an operator's SET, a holder that
	// took it after this one's expiry).
	ErrTakenOver = errors.New("redislease: the coordinator refused the claim: key taken over")

	// ErrDeleted reports that the key is gone from the primary: deleted
	// (DEL, UNLINK), flushed (FLUSHALL, FLUSHDB), or lost with a primary
	// restarted without persistence.
	ErrDeleted = errors.New("redislease: the coordinator refused the claim: key deleted")

	// ErrExpired reports that the key's expiry on the server comes before
	// the lease's deadline: another client shortened it (PEXPIRE, EXPIRE),
	// or the server's clock runs ahead of this process's.
	ErrExpired = errors.New("redislease: the coordinator refused the claim: key expiry shortened")

	// ErrRenewalUnconfirmed reports that the local deadline came before a
	// renewal that would move it was confirmed: the primary did not answer
	// in time, or fewer replicas than needed acknowledged it. From then on
	// the key may expire, on the primary or on the replica promoted in its
	// place, without this holder being told. Its text names the last
	// confirmed write, the deadline and the margin (see [Config.Margin]).
	ErrRenewalUnconfirmed = errors.New("redislease: renewal unconfirmed")

	// ErrFailedOver reports that the server the lease holds its key on is
	// no longer its primary: it answers as a replica (READONLY, or HELLO's
	// role), or a reconnection reached another primary that does not hold
	// the key.
	ErrFailedOver = errors.New("redislease: the coordinator refused the claim: primary failed over")

	// ErrRefused reports that the server refused a renewal for a reason no
	// retry mends, such as an ACL that no longer allows the lease's
	// commands.
	ErrRefused = errors.New("redislease: the server refused the renewal")
)
