package etcdlease

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease"
)

// The wait for a claim follows the recipe of etcd's concurrency.Mutex and
// concurrency.Election, on the same keys: a session puts name + "/" + its
// etcd lease in hex, bound to that lease, and is granted the claim once
// every key under name + "/" with a smaller create revision is deleted. So
// a fleet that mixes this package's Lock with etcd's Mutex (or Campaign with
// Election) on one name excludes itself by the same create revisions.
//
// The recipe is written here rather than called because etcd's mutex and
// election delete the waiting key of a wait that failed with the client's
// context, and etcd's client waits for a connection by default: with the
// cluster gone, their Lock and Campaign return only when it answers again
// or the client is closed, whatever their context says.

// claim is the key of a session that waits its turn for, or holds, a lock
// or an election.
type claim struct {
	s       *concurrency.Session
	r       *renewer
	prefix  string // the lock's or election's name and "/"
	key     string // prefix and the session's etcd lease in hex
	rev     int64  // the key's create revision, 0 before it is known: the fencing token
	granted int64  // the revision the claim was granted at
	// fresh makes the claim put a key of its own even if the session has
	// one: a Locker's (see enqueue).
	fresh bool
}

func newClaim(s *concurrency.Session, r *renewer, name string) *claim {
	return &claim{s: s, r: r, prefix: name + "/", key: keyOf(s, name)}
}

// keyOf returns the key of session s for the lock or election name.
func keyOf(s *concurrency.Session, name string) string {
	return fmt.Sprintf("%s/%x", name, s.Lease())
}

// lock waits until the session holds the lock, as concurrency.Mutex.Lock
// does: the key is put if the session has none, and the lock is the
// session's once the keys created before it are gone and its own is still
// there. If the wait fails, lock withdraws the key.
func (c *claim) lock(ctx context.Context) error {
	owner, err := c.enqueue(ctx)
	if err != nil {
		return c.withdraw(ctx, err)
	}
	if owner == nil {
		return nil
	}
	if err := c.waitDeletes(ctx); err != nil {
		return c.withdraw(ctx, err)
	}
	// The session's etcd lease, and the key with it, may be gone.
	got, err := c.s.Client().Get(ctx, c.key)
	if err != nil {
		return c.withdraw(ctx, err)
	}
	if len(got.Kvs) == 0 {
		return fmt.Errorf("%w: %s was deleted while Lock waited", concurrency.ErrSessionExpired, quote(c.key))
	}
	c.granted = got.Header.Revision
	return nil
}

// tryLock takes the lock if no one holds it now, as concurrency.Mutex.TryLock
// does: in the one transaction of enqueue, the key is put and the owner read.
// If another key owns the lock, tryLock deletes its own, so that no claim is
// left waiting, and returns an error wrapping [lease.ErrHeld].
func (c *claim) tryLock(ctx context.Context) error {
	owner, err := c.enqueue(ctx)
	if err != nil {
		return c.withdraw(ctx, err)
	}
	if owner == nil {
		return nil
	}
	return c.withdraw(ctx, fmt.Errorf("%w: %s, created at revision %d, holds it",
		lease.ErrHeld, quote(string(owner.Key)), owner.CreateRevision))
}

// enqueue puts the session's key if it has none and reads the owner of the
// lock, the key under the prefix created first, in one transaction, as
// concurrency.Mutex does. It returns the owner, or nil if it is the claim's
// own key; then the claim is granted.
//
// A session that has the key already is given the same claim, as etcd's
// mutex gives it, unless the claim is fresh: a Locker orders its leases of
// one key in the process, so a key it finds is one that outlived its lease
// (a release etcd did not answer). enqueue then deletes it, if it was not
// made anew meanwhile, and puts its own, so that the new lease's token is
// larger than the old one's.
func (c *claim) enqueue(ctx context.Context) (owner *mvccpb.KeyValue, err error) {
	cli := c.s.Client()
	absent := clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0)
	put := clientv3.OpPut(c.key, "", clientv3.WithLease(c.s.Lease()))
	first := clientv3.OpGet(c.prefix, clientv3.WithFirstCreate()...)
	for {
		resp, err := cli.Txn(ctx).If(absent).Then(put, first).Else(clientv3.OpGet(c.key), first).Commit()
		if err != nil {
			return nil, err
		}
		c.rev = resp.Header.Revision
		if !resp.Succeeded {
			c.rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
			if c.fresh {
				stale := clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.rev)
				c.rev = 0 // no key of the claim's own yet
				if _, err := cli.Txn(ctx).If(stale).Then(clientv3.OpDelete(c.key)).Commit(); err != nil {
					return nil, err
				}
				continue
			}
		}
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 && kvs[0].CreateRevision != c.rev {
			return kvs[0], nil
		}
		c.granted = resp.Header.Revision
		return nil, nil
	}
}

// campaign waits until the session leads the election with value, as
// concurrency.Election.Campaign does: the key is put with value if the
// session has none, value is proclaimed if the session's key holds another,
// and the session leads once the keys created before it are gone. As in
// etcd's election, the grant is the revision of the put, and the candidate's
// own key is not read again. If the wait fails, campaign withdraws the key.
func (c *claim) campaign(ctx context.Context, value string) error {
	cli := c.s.Client()
	absent := clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0)
	resp, err := cli.Txn(ctx).If(absent).Then(clientv3.OpPut(c.key, value, clientv3.WithLease(c.s.Lease()))).Else(clientv3.OpGet(c.key)).Commit()
	if err != nil {
		return c.withdraw(ctx, err)
	}
	c.rev, c.granted = resp.Header.Revision, resp.Header.Revision
	if !resp.Succeeded {
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		c.rev = kv.CreateRevision
		if string(kv.Value) != value {
			proclaim, err := cli.Txn(ctx).If(c.same()).Then(clientv3.OpPut(c.key, value, clientv3.WithLease(c.s.Lease()))).Commit()
			if err == nil && !proclaim.Succeeded {
				err = concurrency.ErrElectionNotLeader
			}
			if err != nil {
				return c.withdraw(ctx, err)
			}
		}
	}
	if err := c.waitDeletes(ctx); err != nil {
		return c.withdraw(ctx, err)
	}
	return nil
}

// same is true in a transaction while the key is the one the claim put: it
// has the claim's create revision.
func (c *claim) same() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.rev)
}

// unlock deletes the key, as concurrency.Mutex.Unlock does: whatever it
// holds.
func (c *claim) unlock(ctx context.Context) error {
	_, err := c.s.Client().Delete(ctx, c.key)
	return err
}

// resign deletes the key if it is still the one the claim put, as
// concurrency.Election.Resign does.
func (c *claim) resign(ctx context.Context) error {
	_, err := c.s.Client().Txn(ctx).If(c.same()).Then(clientv3.OpDelete(c.key)).Commit()
	return err
}

// waitDeletes returns once every key under the prefix created before the
// claim's is deleted, as etcd's recipe waits: for the deletion of the
// newest of them, then of the newest of those left.
func (c *claim) waitDeletes(ctx context.Context) error {
	cli := c.s.Client()
	before := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(c.rev-1))
	for {
		resp, err := cli.Get(ctx, c.prefix, before...)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if err := waitDelete(ctx, cli, string(resp.Kvs[0].Key), resp.Header.Revision); err != nil {
			return err
		}
	}
}

// waitDelete returns once key is deleted at revision rev or later.
func waitDelete(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var last clientv3.WatchResponse
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(rev)) {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
		last = wr
	}
	if err := last.Err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("the watch ended before the key was deleted")
}

// withdraw deletes the key after the wait failed with err, so that it does
// not hold the claim for a session that no longer waits, and returns err,
// with what the deletion met if it failed.
//
// ctx, the wait's, has usually ended: the deletion has a context of its
// own, which ends when the session does (its etcd lease, and the key with
// it, then goes: revoked at Close, or expired since no one renews it), when
// the client is closed, or after the TTL etcd granted the session. etcd's
// client gives up on a session whose renewals go unanswered for the TTL, so
// with the cluster gone the deletion ends with the session. Before the put
// is known (its answer lost to ctx), the key is deleted only if it is bound
// to the session's etcd lease.
func (c *claim) withdraw(ctx context.Context, err error) error {
	if c.rev == 0 && ctx.Err() == nil {
		return err // the put was refused: there is no key to withdraw
	}
	select {
	case <-c.s.Done():
		return err
	default:
	}
	ttl := c.r.grantedTTL()
	if ttl <= 0 {
		return err // etcd has no lease of the session: the key went with it
	}
	dctx, cancel := context.WithTimeout(c.s.Client().Ctx(), ttl)
	defer cancel()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-c.s.Done():
			cancel()
		case <-dctx.Done():
		}
	}()
	cond := c.same()
	if c.rev == 0 {
		cond = clientv3.Compare(clientv3.LeaseValue(c.key), "=", c.s.Lease())
	}
	_, derr := c.s.Client().Txn(dctx).If(cond).Then(clientv3.OpDelete(c.key)).Commit()
	cancel()
	<-ended
	if derr != nil {
		return fmt.Errorf("%w; %s was not deleted, and goes with the session's etcd lease: %v", err, quote(c.key), derr)
	}
	return err
}
