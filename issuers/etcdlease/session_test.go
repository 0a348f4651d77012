package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
)

// streamCounts counts the gRPC streams a client opened, by method.
type streamCounts struct {
	mu sync.Mutex
	n  map[string]int
}

const (
	keepAliveMethod = "/etcdserverpb.Lease/LeaseKeepAlive"
	watchMethod     = "/etcdserverpb.Watch/Watch"
)

func (c *streamCounts) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// streamCountingClient returns a client of srv that counts the streams it
// opens.
func streamCountingClient(t *testing.T, srv *etcdtest.Server) (*clientv3.Client, *streamCounts) {
	t.Helper()
	c := &streamCounts{n: make(map[string]int)}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				c.mu.Lock()
				c.n[method]++
				c.mu.Unlock()
				return streamer(ctx, desc, cc, method, opts...)
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, c
}

// lockMany locks n keys under name on s, from 16 goroutines at once, half
// of them by Lock and half by a Locker.
func lockMany(t *testing.T, s *concurrency.Session, name string, n int) []*etcdlease.Lease {
	t.Helper()
	leases := make([]*etcdlease.Lease, n)
	locker := etcdlease.NewLocker(s)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				key := fmt.Sprintf("%s/%d", name, i)
				if i%2 == 0 {
					l, err := etcdlease.Lock(t.Context(), s, key)
					if err != nil {
						errs <- err
						continue
					}
					leases[i] = l
					continue
				}
				l, err := locker.Lock(t.Context(), key)
				if err != nil {
					errs <- err
					continue
				}
				leases[i] = l.(*etcdlease.Lease)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, l := range leases {
			l.Unlock(context.Background())
		}
	})
	return leases
}

// checkAllLive fails the test for each lease of leases that was lost,
// but those of the indexes in lost.
func checkAllLive(t *testing.T, leases []*etcdlease.Lease, lost ...int) {
	t.Helper()
	want := make(map[int]bool)
	for _, i := range lost {
		want[i] = true
	}
	n := 0
	for i, l := range leases {
		if err := l.Signal().Err(); err != nil && !want[i] {
			n++
			if n <= 3 {
				t.Errorf("lease %d: Err() = %v, want nil", i, err)
			}
		}
	}
	if n > 0 {
		t.Errorf("%d of %d leases lost, want %d", n, len(leases), len(lost))
	}
}

// TestSessionSharesStreams: the leases of one session, by Lock and by a
// Locker, renew the session's etcd lease on one keepalive stream beside
// the session's own and follow their keys on one watch stream, and each
// is released alone.
func TestSessionSharesStreams(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	cli, counts := streamCountingClient(t, srv)
	s := newSessionOn(t, cli)
	leases := lockMany(t, s, "/locks/many", 200)
	// A push from etcd after the leases' watches were made: a lease that
	// follows its key through the shared watch sees its deletion.
	deleteKey(t, op, leases[7].Key())
	checkLost(t, leases[7].Signal(), hang, "/locks/many/7", etcdlease.ErrKeyDeleted, "deleted")
	if n := counts.get(keepAliveMethod); n != 2 {
		t.Errorf("%d keepalive streams opened for 200 leases, want 2 (the session's and the leases')", n)
	}
	if n := counts.get(watchMethod); n != 1 {
		t.Errorf("%d watch streams opened for 200 leases, want 1", n)
	}
	for i, l := range leases[:100] {
		if err := l.Unlock(t.Context()); err != nil && i != 7 {
			t.Fatalf("Unlock of lease %d = %v", i, err)
		}
	}
	checkAllLive(t, leases[100:])
	resp, err := op.Get(t.Context(), "/locks/many/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 100 {
		t.Errorf("%d keys left after 100 of 200 leases were released, want 100", resp.Count)
	}
}

// TestSessionPushLosesOnlyItsLease: the deletion of one key among many,
// and the put of another bound to no etcd lease, lose exactly the two
// leases of those keys; the revocation of the session's etcd lease loses
// them all.
func TestSessionPushLosesOnlyItsLease(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	s := newLongSession(t, srv)
	leases := lockMany(t, s, "/locks/push", 100)
	deleteKey(t, op, leases[3].Key())
	if _, err := op.Put(t.Context(), leases[42].Key(), "taken"); err != nil {
		t.Fatal(err)
	}
	checkLost(t, leases[3].Signal(), hang, "/locks/push/3", etcdlease.ErrKeyDeleted, "deleted")
	// etcd sends the events of one watch stream in the order of their
	// revisions: once the later one is seen, so was every other.
	checkLost(t, leases[42].Signal(), hang, "/locks/push/42", etcdlease.ErrKeyTakenOver, "taken over")
	checkAllLive(t, leases, 3, 42)

	revoke(t, op, s)
	for i, l := range leases {
		err := waitLost(t, l.Signal(), hang)
		if !errors.Is(err, etcdlease.ErrKeyDeleted) && !errors.Is(err, etcdlease.ErrSessionExpired) && i != 42 {
			t.Errorf("lease %d: Err() = %v after the revocation, want ErrKeyDeleted or ErrSessionExpired", i, err)
		}
	}
}

// TestSessionLocksAfterRelease: a session whose every lease was released
// takes its next locks on the same renewal stream; a lease with a margin
// of its own renews on a stream of its own.
func TestSessionLocksAfterRelease(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	cli, counts := streamCountingClient(t, srv)
	s := newSessionOn(t, cli)
	for i := range 3 {
		l := mustLock(t, s, lockName)
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatalf("Unlock %d = %v", i, err)
		}
	}
	if n := counts.get(keepAliveMethod); n != 2 {
		t.Errorf("%d keepalive streams opened for 3 leases one after another, want 2 (the session's and the leases')", n)
	}
	a := mustLock(t, s, lockName+"/a")
	b := mustLock(t, s, lockName+"/b", etcdlease.WithMargin(time.Second))
	if n := counts.get(keepAliveMethod); n != 3 {
		t.Errorf("%d keepalive streams opened with a second margin, want 3", n)
	}
	checkAllLive(t, []*etcdlease.Lease{a, b})
	a.Unlock(t.Context())
	b.Unlock(t.Context())
}
