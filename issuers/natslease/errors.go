package natslease

import "errors"

// The causes of a loss. A holder's [signal.Signal] reports a loss with a
// lost.Error that wraps one of these, itself wrapped with what the server
// said (the operation and revision seen, the last confirmed renewal); match
// them with [errors.Is].
var (
	// ErrTakenOver reports that the key holds another value than this
	// lease's: another client wrote it (an operator's Put), or a renewal
	// found another revision than the lease's last.
	ErrTakenOver = errors.New("natslease: the coordinator refused the claim: key taken over")

	// ErrDeleted reports that the key was deleted (a delete marker) by
	// someone other than its holder.
	ErrDeleted = errors.New("natslease: the coordinator refused the claim: key deleted")

	// ErrPurged reports that the key was purged: by an operator's Purge, or
	// by the server when its TTL ran out before the lease's deadline (the
	// server's clock ran ahead of this process's by more than the margin).
	ErrPurged = errors.New("natslease: the coordinator refused the claim: key purged")

	// ErrRenewalUnconfirmed reports that the local deadline came before a
	// renewal that would move it was confirmed: the server did not answer
	// in time. From then on the key may expire without this holder being
	// told. Its text names the last confirmed write, the deadline and the
	// margin (see [Config.Margin]).
	ErrRenewalUnconfirmed = errors.New("natslease: renewal unconfirmed")

	// ErrRefused reports that the server refused a renewal for a reason no
	// retry mends, such as a permission taken away or the bucket deleted.
	ErrRefused = errors.New("natslease: the server refused the renewal")
)
