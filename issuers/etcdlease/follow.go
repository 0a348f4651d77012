package etcdlease

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// askTimeout bounds the read of the key after etcd compacted the history a
// watch was to start from. The read decides whether the claim stands; the
// local deadline goes on running while it waits.
const askTimeout = time.Second

// follow loses the lease when the session ends or the watch on the key
// reports that the claim is gone, and returns at the loss or when ctx ends.
//
// Every loss is made with the cause known at that moment: no question to
// etcd runs between learning that the claim is gone and the loss, since
// another holder may be granted the claim at once.
func (l *Lease) follow(ctx context.Context, s *concurrency.Session, events clientv3.WatchChan) {
	defer l.watchers.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			l.lose(l.sessionEnded(s))
			return
		case wr, ok := <-events:
			if ctx.Err() != nil {
				return // released: the end of the watch is ours
			}
			if !ok {
				l.lose(fmt.Errorf("%w: the watch on %s closed", ErrClusterLost, quote(l.key)))
				return
			}
			if wr.CompactRevision != 0 {
				// etcd compacted the history the watch was to start
				// from: the revision Campaign reports as the grant,
				// as etcd's election does, is its put, before the wait
				// behind the leaders, and a watch that reconnects
				// resumes where it was. The key as it is now tells
				// whether the claim stands.
				from, err := l.resync(ctx, s)
				if err != nil {
					l.lose(err)
					return
				}
				// The client closed the old watch after its last
				// response, this one.
				events = s.Client().Watch(clientv3.WithRequireLeader(ctx), l.key, clientv3.WithRev(from))
				continue
			}
			if err := wr.Err(); err != nil {
				l.lose(fmt.Errorf("%w: the watch on %s ended: %w", ErrClusterLost, quote(l.key), err))
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					l.lose(l.keyDeleted(fmt.Sprintf("at revision %d", ev.Kv.ModRevision)))
					return
				}
				// A put that keeps the key's create revision and the
				// session's etcd lease is the claim updated (an
				// election's Proclaim). Any other put binds the key to
				// another lease, or to none, or is a new key: the key no
				// longer lives and dies with the session.
				if ev.Kv.CreateRevision != l.rev || clientv3.LeaseID(ev.Kv.Lease) != s.Lease() {
					l.lose(fmt.Errorf("%w: %s put at revision %d with create revision %d and etcd lease %x, not %d and %x",
						ErrKeyTakenOver, quote(l.key), ev.Kv.ModRevision, ev.Kv.CreateRevision, ev.Kv.Lease, l.rev, s.Lease()))
					return
				}
			}
		}
	}
}

// followConn loses the lease when the client's connection can reach no etcd
// endpoint, and returns at the loss or when ctx ends.
//
// The connection is the client's view of the whole cluster: it stays ready
// while any endpoint answers. Once it fails, the holder would learn of a
// revocation or a takeover only after reconnecting, and its session cannot
// renew, so the lease is lost at once rather than when the session's TTL
// runs out. A connection that drops and comes straight back passes through
// connecting, not failure, and loses nothing (TestLockKeptThroughConnectionBlip).
func (l *Lease) followConn(ctx context.Context, conn *grpc.ClientConn) {
	defer l.watchers.Done()
	for {
		st := conn.GetState()
		if st == connectivity.TransientFailure || st == connectivity.Shutdown {
			l.lose(fmt.Errorf("%w: the client's connection to etcd is %v", ErrClusterLost, st))
			return
		}
		if !conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}

// sessionEnded returns the cause of the end of session s, from what the
// lease knows without asking: the session's client was closed, etcd
// answered a renewal that it has no lease of the session, or the session
// stopped renewing a lease etcd still had at the last confirmed renewal.
func (l *Lease) sessionEnded(s *concurrency.Session) error {
	switch {
	case s.Client().Ctx().Err() != nil:
		return fmt.Errorf("%w: the etcd client of session %x was closed", ErrClusterLost, s.Lease())
	case l.renew.gone():
		return fmt.Errorf("%w: etcd has no lease %x any more", ErrSessionExpired, s.Lease())
	default:
		return fmt.Errorf("%w: session %x stopped renewing its etcd lease; %s", ErrSessionClosed, s.Lease(), l.renew.lastConfirmed())
	}
}

// keyDeleted returns the cause of the deletion of the key, which when tells
// ("at revision 7"). etcd deletes the key with the session's etcd lease when
// someone revokes it, and publishes nothing else that tells that deletion
// from one made by hand; the lease reports ErrSessionExpired only if a
// renewal already told it that etcd has no lease of the session.
func (l *Lease) keyDeleted(when string) error {
	if l.renew.gone() {
		return fmt.Errorf("%w: etcd has no lease %x any more and deleted %s with it %s",
			ErrSessionExpired, l.renew.id, quote(l.key), when)
	}
	return fmt.Errorf("%w: %s deleted %s, by hand or with the session's etcd lease %x if it was revoked",
		ErrKeyDeleted, quote(l.key), when, l.renew.id)
}

// resync reads the holder's key after the watch lost the history it was to
// start from, and returns the revision to watch from, or the cause of the
// loss if the claim is gone.
func (l *Lease) resync(ctx context.Context, s *concurrency.Session) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	resp, err := s.Client().Get(rctx, l.key)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: etcd compacted the history of the watch on %s and did not answer: %w", ErrClusterLost, quote(l.key), err)
	case len(resp.Kvs) == 0:
		return 0, l.keyDeleted(fmt.Sprintf("by revision %d", resp.Header.Revision))
	}
	if kv := resp.Kvs[0]; kv.CreateRevision != l.rev || clientv3.LeaseID(kv.Lease) != s.Lease() {
		return 0, fmt.Errorf("%w: %s found at revision %d with create revision %d and etcd lease %x, not %d and %x",
			ErrKeyTakenOver, quote(l.key), resp.Header.Revision, kv.CreateRevision, kv.Lease, l.rev, s.Lease())
	}
	return resp.Header.Revision + 1, nil
}
