package etcdlease_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zukhruf/lease/issuers/etcdlease"
)

// peerClaim is a claim of etcd's own recipe on a name: it returns once
// granted, with the create revision of its key and its release.
type peerClaim func(ctx context.Context, s *concurrency.Session, name string) (rev int64, release func(context.Context) error, err error)

// peers are etcd's mutex and election, each beside this package's claim on
// the same name.
var peers = map[string]struct {
	peer peerClaim
	ours func(ctx context.Context, s *concurrency.Session, name string) (*etcdlease.Lease, error)
}{
	"Lock beside concurrency.Mutex": {
		peer: func(ctx context.Context, s *concurrency.Session, name string) (int64, func(context.Context) error, error) {
			m := concurrency.NewMutex(s, name)
			if err := m.Lock(ctx); err != nil {
				return 0, nil, err
			}
			owner := m.IsOwner() // CreateRevision(key) = the key's create revision
			return owner.GetCompare().GetCreateRevision(), m.Unlock, nil
		},
		ours: claims["Lock"],
	},
	"Campaign beside concurrency.Election": {
		peer: func(ctx context.Context, s *concurrency.Session, name string) (int64, func(context.Context) error, error) {
			e := concurrency.NewElection(s, name)
			if err := e.Campaign(ctx, "peer"); err != nil {
				return 0, nil, err
			}
			return e.Rev(), e.Resign, nil
		},
		ours: claims["Campaign"],
	},
}

// A fleet that mixes this package's claims with etcd's own recipe on one
// name excludes itself in the order of the keys' create revisions: etcd's
// holder first, then the lease, which waited before etcd's third claim,
// then that one; each with a larger revision than the one before.
func TestMixedFleet(t *testing.T) {
	t.Parallel()
	for name, p := range peers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, op := startEtcdWithOp(t)
			s1, s2, s3 := newSession(t, srv), newSession(t, srv), newSession(t, srv)
			rev1, release1, err := p.peer(t.Context(), s1, lockName)
			if err != nil {
				t.Fatal(err)
			}
			second := make(chan claimed, 1)
			go func() {
				l, err := p.ours(t.Context(), s2, lockName)
				second <- claimed{l, err}
			}()
			waitWaiters(t, op, lockName, 2)
			type peerGranted struct {
				rev     int64
				release func(context.Context) error
				err     error
			}
			third := make(chan peerGranted, 1)
			go func() {
				rev, release, err := p.peer(t.Context(), s3, lockName)
				third <- peerGranted{rev, release, err}
			}()
			waitWaiters(t, op, lockName, 3)

			if err := release1(t.Context()); err != nil {
				t.Fatal(err)
			}
			r := waitFor(t, second, hang, "the lease to be granted after etcd's first holder released")
			if r.err != nil {
				t.Fatal(r.err)
			}
			checkKey(t, r.lease, lockName, s2)
			if r.lease.Token() <= rev1 {
				t.Errorf("Token() = %d, want more than etcd's first holder's %d", r.lease.Token(), rev1)
			}
			resp, err := op.Get(t.Context(), sessionKey(lockName, s2))
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != r.lease.Token() {
				t.Errorf("the lease's key in etcd = %v, want create revision %d", resp.Kvs, r.lease.Token())
			}
			select {
			case g := <-third:
				t.Fatalf("etcd's third claim granted (revision %d, %v) while the lease holds", g.rev, g.err)
			default:
			}
			if err := r.lease.Signal().Err(); err != nil {
				t.Fatalf("Err() = %v, want the lease live", err)
			}

			if err := r.lease.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			g := waitFor(t, third, hang, "etcd's third claim to be granted after the lease's release")
			if g.err != nil {
				t.Fatal(g.err)
			}
			if g.rev <= r.lease.Token() {
				t.Errorf("etcd's third holder's revision = %d, want more than the lease's %d", g.rev, r.lease.Token())
			}
			if err := g.release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if resp, err := op.Get(t.Context(), lockName+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
				t.Errorf("keys under %s/ after every release: %v, %v, want none", lockName, resp, err)
			}
		})
	}
}
