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

// askTimeout bounds the one question the follower asks etcd after a push,
// whether the session's lease still exists, which only picks the cause to
// report. An etcd that does not answer in time gets the cause the push
// alone supports.
const askTimeout = time.Second

// follow loses the lease when the session ends or the watch on the key
// reports that the claim is gone, and returns at the loss or when ctx ends.
func (l *Lease) follow(ctx context.Context, s *concurrency.Session, events clientv3.WatchChan) {
	defer l.watchers.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			l.lose(l.sessionEnded(ctx, s))
			return
		case wr, ok := <-events:
			if ctx.Err() != nil {
				return // released: the end of the watch is ours
			}
			if !ok {
				l.lose(fmt.Errorf("%w: the watch on %q closed", ErrClusterLost, l.key))
				return
			}
			if wr.CompactRevision != 0 {
				// etcd compacted the history the watch was to start
				// from: the revision etcd's election reports as the
				// grant is its put, before the wait behind the leaders,
				// and a watch that reconnects resumes where it was. The
				// key as it is now tells whether the claim stands.
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
				l.lose(fmt.Errorf("%w: the watch on %q ended: %w", ErrClusterLost, l.key, err))
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					l.lose(l.keyDeleted(ctx, s, fmt.Sprintf("at revision %d", ev.Kv.ModRevision)))
					return
				}
				// A put that keeps the key's create revision and the
				// session's etcd lease is the claim updated (an
				// election's Proclaim). Any other put binds the key to
				// another lease, or to none, or is a new key: the key no
				// longer lives and dies with the session.
				if ev.Kv.CreateRevision != l.rev || clientv3.LeaseID(ev.Kv.Lease) != s.Lease() {
					l.lose(fmt.Errorf("%w: %q put at revision %d with create revision %d and etcd lease %x, not %d and %x",
						ErrKeyTakenOver, l.key, ev.Kv.ModRevision, ev.Kv.CreateRevision, ev.Kv.Lease, l.rev, s.Lease()))
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

// sessionEnded returns the cause of the end of session s: etcd has no lease
// of the session any more, the session stopped renewing a lease etcd still
// has, or the client cannot tell.
func (l *Lease) sessionEnded(ctx context.Context, s *concurrency.Session) error {
	if s.Client().Ctx().Err() != nil {
		return fmt.Errorf("%w: the etcd client of session %x was closed", ErrClusterLost, s.Lease())
	}
	ttl, err := l.leaseTTL(ctx, s)
	switch {
	case err != nil:
		return fmt.Errorf("%w: session %x ended and etcd did not answer: %w", ErrClusterLost, s.Lease(), err)
	case ttl <= 0:
		return fmt.Errorf("%w: etcd has no lease %x any more", ErrSessionExpired, s.Lease())
	default:
		return fmt.Errorf("%w: session %x stopped renewing its etcd lease, %ds before it expires", ErrSessionClosed, s.Lease(), ttl)
	}
}

// keyDeleted returns the cause of the deletion of the key, which when tells
// ("at revision 7"): etcd deleted it with the session's lease, or someone
// deleted it.
func (l *Lease) keyDeleted(ctx context.Context, s *concurrency.Session, when string) error {
	// etcd removes a revoked lease before it publishes the deletion of the
	// lease's keys, so a lease that is still there was not revoked.
	if ttl, err := l.leaseTTL(ctx, s); err == nil && ttl <= 0 {
		return fmt.Errorf("%w: etcd has no lease %x any more and deleted %q with it %s",
			ErrSessionExpired, s.Lease(), l.key, when)
	}
	return fmt.Errorf("%w: %q deleted %s", ErrKeyDeleted, l.key, when)
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
		return 0, fmt.Errorf("%w: etcd compacted the history of the watch on %q and did not answer: %w", ErrClusterLost, l.key, err)
	case len(resp.Kvs) == 0:
		return 0, l.keyDeleted(ctx, s, fmt.Sprintf("by revision %d", resp.Header.Revision))
	}
	if kv := resp.Kvs[0]; kv.CreateRevision != l.rev || clientv3.LeaseID(kv.Lease) != s.Lease() {
		return 0, fmt.Errorf("%w: %q found at revision %d with create revision %d and etcd lease %x, not %d and %x",
			ErrKeyTakenOver, l.key, resp.Header.Revision, kv.CreateRevision, kv.Lease, l.rev, s.Lease())
	}
	return resp.Header.Revision + 1, nil
}

// leaseTTL asks etcd how long the session's lease has left: -1 if etcd has no
// such lease.
func (l *Lease) leaseTTL(ctx context.Context, s *concurrency.Session) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	resp, err := s.Client().TimeToLive(ctx, s.Lease())
	if err != nil {
		return 0, err
	}
	return resp.TTL, nil
}
