package etcdlease

import "errors"

// The causes of a loss. A holder's [signal.Signal] reports a loss with a
// lost.Error that wraps one of these, itself wrapped with what etcd
// reported (the key, the revision, the etcd lease, the gRPC state); match
// them with [errors.Is].
var (
	// ErrSessionExpired reports that etcd answered a renewal that it no
	// longer has the session's lease: someone revoked it, or it expired. etcd
	// deleted the holder's key with it. A revocation usually reaches the
	// holder first as the deletion of its key, reported as [ErrKeyDeleted].
	ErrSessionExpired = errors.New("etcdlease: session lease revoked or expired")

	// ErrSessionClosed reports that the session stopped renewing its lease
	// while etcd still had it: its owner closed or orphaned it. The key goes
	// when the lease expires, and the holder must not wait for that.
	ErrSessionClosed = errors.New("etcdlease: session closed")

	// ErrKeyDeleted reports that the holder's key was deleted: by hand, or
	// by etcd with the session's etcd lease when someone revoked it. etcd
	// publishes nothing that tells the two apart, and the lease does not ask
	// before it is lost: the coordinator refused the claim.
	ErrKeyDeleted = errors.New("etcdlease: the coordinator refused the claim: key deleted")

	// ErrKeyTakenOver reports that someone put the holder's key again bound
	// to another etcd lease, or to none, or made it anew: the key, and with
	// it the claim, no longer lives and dies with the holder's session.
	ErrKeyTakenOver = errors.New("etcdlease: the coordinator refused the claim: key taken over")

	// ErrClusterLost reports that the client can no longer follow the key:
	// it cannot reach any etcd endpoint, the member it watches from has no
	// leader, or the watch ended. The claim may still stand in etcd, but
	// nothing would tell the holder if it did not.
	ErrClusterLost = errors.New("etcdlease: cluster lost")

	// ErrRenewalUnconfirmed reports that the local deadline came before etcd
	// confirmed a renewal of the session's etcd lease: from then on, etcd
	// may expire the lease and grant the claim to someone else without
	// telling the holder. Its text names the send time of the last confirmed
	// renewal, the TTL etcd granted in it, the deadline and the margin (see
	// [WithMargin]).
	ErrRenewalUnconfirmed = errors.New("etcdlease: renewal unconfirmed")

	// ErrRenewalRefused reports that etcd refused to renew the session's
	// etcd lease (permission denied: with auth enabled, etcd renews a lease
	// only for a user that may write its keys, and the user's role lost the
	// permission on the lock's or election's keys). etcd will expire the
	// lease; the lease does not wait for it. Lock and Campaign return it,
	// wrapped, when the first renewal is refused.
	ErrRenewalRefused = errors.New("etcdlease: renewal refused")
)
