package k8slease

import "errors"

// The causes of a loss. A holder's [signal.Signal] reports a loss with a
// lost.Error that wraps one of these, itself wrapped with what the apiserver
// reported (the Lease, its resourceVersion, the record it holds); match them
// with [errors.Is].
var (
	// ErrTakenOver reports that the Lease object names another holder, or
	// none: another candidate took it over (after this holder was paused,
	// say), an operator edited spec.holderIdentity, or a client-go candidate
	// released it over this holder's record.
	ErrTakenOver = errors.New("k8slease: the coordinator refused the claim: lease taken over")

	// ErrDeleted reports that the Lease object was deleted.
	ErrDeleted = errors.New("k8slease: the coordinator refused the claim: lease deleted")

	// ErrRenewalUnconfirmed reports that the local deadline came before the
	// apiserver confirmed a renewal that would move it: from then on, another
	// candidate may take the Lease over without this holder being told. Its
	// text names the last confirmed renewal, the deadline and the margin (see
	// [Config.Margin]).
	ErrRenewalUnconfirmed = errors.New("k8slease: renewal unconfirmed")

	// ErrRefused reports that the apiserver refused a renewal for a reason
	// that no retry mends (the holder's credentials were revoked, the Lease
	// became invalid): the holder cannot renew its claim.
	ErrRefused = errors.New("k8slease: the apiserver refused the renewal")
)
