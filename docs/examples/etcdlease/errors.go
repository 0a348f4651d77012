package etcdlease

import "errors"

// The causes of a loss. A holder's [signal.Signal] reports a loss with a
// lost.Error that wraps one of these, itself wrapped with what etcd
// reported (the key, the revision, the etcd lease, the gRPC state); match
// them with [errors.Is].
var (
	// ErrSessionExpired reports that etcd no longer has the session's lease:
	// someone revoked it, or it expired because the session could not renew
	// it in time. etcd deleted the holder's key with it.
	ErrSessionExpired = errors.New("etcdlease: session lease revoked or expired")

	// ErrSessionClosed reports that the session stopped renewing its lease
	// while etcd still had it: its owner closed or orphaned it. The key goes
	// when the lease expires, and the holder must not wait for that.
	ErrSessionClosed = errors.New("etcdlease: session closed")

	// ErrKeyDeleted reports that the holder's key was deleted while the
	// session lived: the coordinator refused the claim.
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
)
