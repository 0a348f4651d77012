package etcdlease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/issuers/etcdlease"
)

func TestLockLostWhenSessionRevoked(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	s1, s2 := newLongSession(t, srv), newSession(t, srv)

	first := mustLock(t, s1, lockName)
	sig := first.Signal()
	checkKey(t, first, lockName, s1)
	// The second holder waits in Lock once its own key is in etcd.
	second := claimBehind(t, op, first, lockName, s2, func(ctx context.Context) (*etcdlease.Lease, error) {
		return etcdlease.Lock(ctx, s2, lockName)
	})
	if err := sig.Err(); err != nil {
		t.Fatalf("before the revocation: Err() = %v, want nil", err)
	}

	// etcd deletes the key with the revoked lease, and the deletion is
	// what reaches the holder: it does not ask etcd why before it is lost.
	revoke(t, op, s1)
	err := checkLost(t, sig, hang, lockName, etcdlease.ErrKeyDeleted, "if it was revoked")

	next := checkNext(t, second, first, "second holder")
	checkFenced(t, op, first, next)
	checkRelease(t, "second holder's Unlock", next.Unlock)
	// A release after the loss cleans up in etcd and keeps the loss.
	checkUnlockAfterLoss(t, first, err)
}

func TestLockLostWhenKeyDeleted(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	l := mustLock(t, newSession(t, srv), lockName)

	deleteKey(t, op, l.Key())
	// The session lives: the loss must not be reported as its expiry.
	err := checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrKeyDeleted, "deleted")
	checkUnlockAfterLoss(t, l, err)
}

func TestLockLostWhenKeyTakenOver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, op := startEtcdWithOp(t)
	l := mustLock(t, newSession(t, srv), lockName)

	other, err := op.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Put(ctx, l.Key(), "", clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	err = checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrKeyTakenOver, fmt.Sprintf("etcd lease %x", other.ID))
	checkUnlockAfterLoss(t, l, err)
}

func TestLockLostWhenSessionOrphaned(t *testing.T) {
	t.Parallel()
	s := newSession(t, startEtcd(t))
	l := mustLock(t, s, lockName)

	// The session stops renewing its etcd lease, which etcd still has.
	s.Orphan()
	err := checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrSessionClosed, "stopped renewing")
	checkUnlockAfterLoss(t, l, err)
}

func TestLockLostWhenClusterStops(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	cli := newClient(t, srv)
	l := mustLock(t, newSessionOn(t, cli), lockName)
	sig := l.Signal()

	stopped := make(chan struct{})
	go func() {
		srv.Close()
		close(stopped)
	}()
	err := checkLost(t, sig, ttl*time.Second, lockName, etcdlease.ErrClusterLost, "cluster lost")

	// The server waits for open streams before it stops; the client's end
	// them.
	cli.Close()
	waitFor(t, stopped, 3*hang, "etcd to stop")
	l.Unlock(t.Context()) // fails: there is no etcd left to delete the key in
	checkKeptLoss(t, sig, err)
}

func TestLockLostWhenClientCloses(t *testing.T) {
	t.Parallel()
	s := newSession(t, startEtcd(t))
	l := mustLock(t, s, lockName)

	s.Client().Close()
	checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrClusterLost, "cluster lost")
}

func TestUnlockThenRevokeNeverLost(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	s := newSession(t, srv)
	l := mustLock(t, s, lockName)
	probe := probeLoss(t, l.Signal())
	events := watchKey(t, op, l.Key(), l.Token())

	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Errorf("second Unlock = %v, want the first's nil", err)
	}
	// etcd publishes the deletion the release made, then the revocation
	// ends the session: every event that could lose the lease has happened.
	waitEvent(t, events, clientv3.EventTypeDelete, l.Key())
	endSession(t, op, s)
	probe.checkLive(t)
}

func TestCampaignLostWhenLeaderKeyDeleted(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	s1, s2 := newSession(t, srv), newSession(t, srv)

	leader := mustCampaign(t, s1, electionName, "first")
	checkKey(t, leader, electionName, s1)
	// A second candidate waits behind the leader.
	second := claimBehind(t, op, leader, electionName, s2, func(ctx context.Context) (*etcdlease.Lease, error) {
		return etcdlease.Campaign(ctx, s2, electionName, "second")
	})

	deleteKey(t, op, leader.Key())
	checkLost(t, leader.Signal(), hang, electionName, etcdlease.ErrKeyDeleted, "deleted")

	next := checkNext(t, second, leader, "second leader")
	checkRelease(t, "second leader's Resign", next.Resign)
	checkRelease(t, "Resign after the loss", leader.Resign)
}

func TestResignNeverLost(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	s1, s2 := newSession(t, srv), newSession(t, srv)

	leader := mustCampaign(t, s1, electionName, "first")
	probe := probeLoss(t, leader.Signal())
	events := watchKey(t, op, leader.Key(), leader.Token())

	if err := leader.Resign(t.Context()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	waitEvent(t, events, clientv3.EventTypeDelete, leader.Key())
	// Another candidate takes the leadership, and the first session ends.
	second := mustCampaign(t, s2, electionName, "second")
	endSession(t, op, s1)
	probe.checkLive(t)
	checkRelease(t, "second leader's Resign", second.Resign)
}

// A claim whose grant revision etcd compacted away before the lease started
// following it is kept, and followed from the revision the lease reads it
// at. etcd's election reports, as the grant, the revision of the
// candidate's put, before it waited behind the leaders: a compaction during
// a long wait, or while a watch reconnects, leaves the watch without its
// history.
func TestLockKeptThroughCompaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, op := startEtcdWithOp(t)
	s := newSession(t, srv)
	m := concurrency.NewMutex(s, lockName)
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	granted, owner := m.Header().Revision, m.IsOwner()
	// Two writes of someone else's move the revision on, and the
	// compaction drops everything before the last, the revision after the
	// grant among them.
	var put *clientv3.PutResponse
	for range 2 {
		var err error
		if put, err = op.Put(ctx, "/elsewhere", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := op.Compact(ctx, put.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}

	l := startAt(t, s, m, granted, owner.GetCompare().GetCreateRevision())
	// The compaction loses nothing: the deletion that follows is the loss,
	// and it is reported as what it is.
	deleteKey(t, op, l.Key())
	err := checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrKeyDeleted, "deleted")
	checkUnlockAfterLoss(t, l, err)
}

// The cause a lease reports when the end of its session reaches it before
// the watch reports anything is what etcd says of the session's etcd lease.
// After a revocation that order is rare: etcd publishes the deletion of the
// key at once, and the session learns of the revocation at its next
// keepalive, a third of its TTL later at most. It happens when the holder's
// goroutine finds both ready, or when the watch resumes after a reconnection
// later than the keepalive; the test asks for the cause after each way a
// session ends.
func TestSessionEndedCause(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	for _, tc := range []struct {
		name  string
		end   func(t *testing.T, s *concurrency.Session)
		want  error
		words string
	}{
		{"revoked", func(t *testing.T, s *concurrency.Session) { revoke(t, op, s) },
			etcdlease.ErrSessionExpired, "etcd has no lease"},
		{"orphaned", func(t *testing.T, s *concurrency.Session) { s.Orphan() },
			etcdlease.ErrSessionClosed, "stopped renewing"},
		{"client closed", func(t *testing.T, s *concurrency.Session) { s.Client().Close() },
			etcdlease.ErrClusterLost, "was closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(t, srv)
			tc.end(t, s)
			waitFor(t, s.Done(), hang, "the session to end")
			cause, err := etcdlease.SessionEnded(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			checkCause(t, cause, tc.want, tc.words)
		})
	}
}

// What happens to a claim between its grant and the start of the watch is
// not missed: the watch starts at the revision after the grant.
func TestLostBetweenGrantAndWatch(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	for _, tc := range []struct {
		name  string
		lose  func(t *testing.T, s *concurrency.Session, key string)
		want  error
		words string
	}{
		{"key deleted", func(t *testing.T, s *concurrency.Session, key string) { deleteKey(t, op, key) },
			etcdlease.ErrKeyDeleted, "deleted"},
		{"session revoked", func(t *testing.T, s *concurrency.Session, key string) { revoke(t, op, s) },
			etcdlease.ErrSessionExpired, "etcd has no lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(t, srv)
			m := concurrency.NewMutex(s, lockName)
			if err := m.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			granted, owner := m.Header().Revision, m.IsOwner()
			tc.lose(t, s, m.Key())

			l := startAt(t, s, m, granted, owner.GetCompare().GetCreateRevision())
			err := checkLost(t, l.Signal(), hang, lockName, tc.want, tc.words)
			checkUnlockAfterLoss(t, l, err)
		})
	}
}

// etcd's election does not notice that a waiting candidate's own key was
// deleted: its Campaign returns once the leaders before it are gone. The
// lease follows the key from the candidate's put, so it is lost as soon as
// it is made.
func TestCampaignLostWhenKeyDeletedWhileWaiting(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	s1, s2 := newSession(t, srv), newSession(t, srv)

	leader := mustCampaign(t, s1, electionName, "first")
	second := claimBehind(t, op, leader, electionName, s2, func(ctx context.Context) (*etcdlease.Lease, error) {
		return etcdlease.Campaign(ctx, s2, electionName, "second")
	})
	deleteKey(t, op, sessionKey(electionName, s2))
	checkRelease(t, "first leader's Resign", leader.Resign)

	r := waitFor(t, second, hang, "the second candidate's Campaign to return")
	if r.err != nil {
		t.Fatalf("second candidate's Campaign: %v", r.err)
	}
	err := checkLost(t, r.lease.Signal(), hang, electionName, etcdlease.ErrKeyDeleted, "deleted")
	checkUnlockAfterLoss(t, r.lease, err)
}
