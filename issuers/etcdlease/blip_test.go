package etcdlease_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/etcdlease"
)

// startProxy starts a fault proxy to target, closed when the test ends.
func startProxy(t *testing.T, target string) *faultnet.Proxy {
	t.Helper()
	px, err := faultnet.Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}

// proxyClient returns a client that reaches etcd only through px, closed
// when the test ends.
func proxyClient(t *testing.T, px *faultnet.Proxy) *clientv3.Client {
	t.Helper()
	cli := faultClient(t, px.Addr())
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A connection that drops and comes straight back loses nothing, and the
// lease goes on following its claim: a deletion after the blip is reported
// as a deletion.
func TestLockKeptThroughConnectionBlip(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	px := startProxy(t, srv.Endpoint())
	cli := proxyClient(t, px)
	l := mustLock(t, newSessionOn(t, cli), lockName)
	sig := l.Signal()

	px.Cut()
	// A read through the same client, which etcd's client retries,
	// succeeds once it has reconnected.
	if _, err := cli.Get(t.Context(), l.Key()); err != nil {
		t.Fatalf("Get after the blip: %v", err)
	}
	if err := sig.Err(); err != nil {
		t.Fatalf("after the blip, Err() = %v, want nil", err)
	}
	deleteKey(t, op, l.Key())
	err := checkLost(t, sig, hang, lockName, etcdlease.ErrKeyDeleted, "deleted")
	checkUnlockAfterLoss(t, l, err)
}

// A loss stops both goroutines that follow the claim at once, the one that
// saw it and the other, without waiting for Unlock or for the client to
// close.
func TestLossStopsFollowing(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)

	// The watch sees the loss; the connection's follower must stop too.
	t.Run("key deleted", func(t *testing.T) {
		l := mustLock(t, newSession(t, srv), lockName)
		deleteKey(t, op, l.Key())
		err := checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrKeyDeleted, "deleted")
		waitFor(t, etcdlease.Following(l), hang, "the lease to stop following its claim after the loss")
		checkUnlockAfterLoss(t, l, err)
	})

	// The connection's follower sees the loss; the watch must stop too,
	// long before the session's keepalive gives up: the session's TTL is
	// longer than the wait.
	t.Run("no endpoint", func(t *testing.T) {
		px := startProxy(t, srv.Endpoint())
		s, err := concurrency.NewSession(proxyClient(t, px), concurrency.WithTTL(60))
		if err != nil {
			t.Fatal(err)
		}
		l := mustLock(t, s, lockName)
		// Nothing answers at the proxy's address any more.
		px.Close()
		checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrClusterLost, "TRANSIENT_FAILURE")
		waitFor(t, etcdlease.Following(l), hang, "the lease to stop following its claim after the loss")
	})
}
