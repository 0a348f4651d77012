package etcdlease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
)

// The tests of the README's "what you may get wrong" table: each mistake
// made against a real etcd server, and what Lock and Campaign do with it. A
// mistake that cannot heal returns its cause at once: these tests give the
// call a context whose deadline only guards against a hang, and check that
// the error is not the context's.

// countingClient returns a client of srv as user (none if empty) with
// password, closed at the end of the test, and the count of the gRPC
// streams and unary calls it opens.
func countingClient(t *testing.T, srv *etcdtest.Server, user, password string) (*clientv3.Client, *atomic.Int32, error) {
	t.Helper()
	var calls atomic.Int32
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		Username:    user,
		Password:    password,
		DialOptions: []grpc.DialOption{
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				calls.Add(1)
				return streamer(ctx, desc, cc, method, opts...)
			}),
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				calls.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
		},
	})
	if err != nil {
		return nil, &calls, err
	}
	t.Cleanup(func() { cli.Close() })
	return cli, &calls, nil
}

// lockRefused calls Lock, which must fail with a cause that cannot heal,
// and returns its error; it fails the test if Lock was granted or ran until
// the guard's deadline.
func lockRefused(t *testing.T, s *concurrency.Session, key string, opts ...etcdlease.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*hang)
	defer cancel()
	l, err := etcdlease.Lock(ctx, s, key, opts...)
	if l != nil {
		l.Unlock(context.Background())
		t.Fatalf("Lock(%.64q) = a lease, want an error", key)
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "etcdlease: lock ") {
		t.Fatalf("Lock(%.64q) = %v, want etcdlease's error with its cause, before the guard's deadline", key, err)
	}
	return err
}

// TestMistakeNilArguments: a nil context, a nil session, a zero
// concurrency.Session: Lock and Campaign panic naming the call.
func TestMistakeNilArguments(t *testing.T) {
	t.Parallel()
	var nilCtx context.Context // the misuse under test
	s := newSession(t, startEtcd(t))
	for name, tc := range map[string]struct {
		f    func()
		want string
	}{
		"Lock, nil context":      {func() { etcdlease.Lock(nilCtx, s, lockName) }, "etcdlease: Lock called with a nil context"},
		"Lock, nil session":      {func() { etcdlease.Lock(context.Background(), nil, lockName) }, "etcdlease: Lock called with a nil session"},
		"Lock, zero session":     {func() { etcdlease.Lock(context.Background(), new(concurrency.Session), lockName) }, "etcdlease: Lock called with a session not made by concurrency.NewSession"},
		"Campaign, nil context":  {func() { etcdlease.Campaign(nilCtx, s, electionName, "v") }, "etcdlease: Campaign called with a nil context"},
		"Campaign, nil session":  {func() { etcdlease.Campaign(context.Background(), nil, electionName, "v") }, "etcdlease: Campaign called with a nil session"},
		"Campaign, zero session": {func() { etcdlease.Campaign(context.Background(), new(concurrency.Session), electionName, "v") }, "etcdlease: Campaign called with a session not made by concurrency.NewSession"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r, _ := recover().(string); r != tc.want {
					t.Errorf("recover() = %q, want %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestMistakeClosedClientOrSession: the session's client closed, the
// session closed or orphaned before Lock: an error at once.
func TestMistakeClosedClientOrSession(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	s := newSession(t, srv)
	s.Client().Close()
	if err := lockRefused(t, s, lockName); !strings.Contains(err.Error(), "client was closed") {
		t.Errorf("Lock with a closed client = %v, want it to say the client was closed", err)
	}
	s = newSession(t, srv)
	s.Close()
	if err := lockRefused(t, s, lockName); !errors.Is(err, etcdlease.ErrSessionClosed) {
		t.Errorf("Lock with a closed session = %v, want ErrSessionClosed", err)
	}
	s = newSession(t, srv)
	s.Orphan()
	if err := lockRefused(t, s, lockName); !errors.Is(err, etcdlease.ErrSessionClosed) {
		t.Errorf("Lock with an orphaned session = %v, want ErrSessionClosed", err)
	}
}

// TestMistakeClusterUnreachable: the session's cluster stopped before
// Lock, a mistake that may heal: Lock retries with backoff (the lease's
// attempts back off to one a second, where a fixed 50 ms pause made 238 in
// 12 s) and
// returns once the session ends, with no deadline on its context; cut by
// its context first, its error wraps both the context's error and the last
// stream's gRPC error.
func TestMistakeClusterUnreachable(t *testing.T) {
	t.Parallel()
	for _, cut := range []bool{false, true} {
		srv := startEtcd(t)
		cli, calls, err := countingClient(t, srv, "", "")
		if err != nil {
			t.Fatal(err)
		}
		s := newSessionOn(t, cli)
		srv.Close()
		before := calls.Load()
		ctx := context.Background()
		if cut {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Second)
			defer cancel()
		}
		start := time.Now()
		_, err = etcdlease.Lock(ctx, s, lockName)
		took, n := time.Since(start), calls.Load()-before
		t.Logf("cut %v: after %v and %d requests: %v", cut, took.Round(time.Millisecond), n, err)
		// The lease's attempts back off to one a second; etcd's client
		// retries the session's own keepalive stream every 500 ms.
		if limit := int32(3*took.Seconds()) + 6; n > limit {
			t.Errorf("%d requests in %v while the cluster was unreachable, want at most %d", n, took, limit)
		}
		if code := status.Code(err); code != codes.Unavailable && code != codes.Canceled {
			t.Errorf("Lock = %v, want it to wrap the last stream's gRPC error (Unavailable)", err)
		}
		switch {
		case cut && !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("Lock cut by its context = %v, want it to wrap context.DeadlineExceeded", err)
		case !cut && !errors.Is(err, etcdlease.ErrSessionClosed):
			t.Errorf("Lock with the cluster gone = %v, want ErrSessionClosed once the session ended", err)
		}
	}
}

// authServer starts a server with auth enabled: the user root, and alice,
// whose role may read and write the keys under /locks/alice/ and only
// write those under /locks/w/. It returns the server and root's client.
func authServer(t *testing.T) (*etcdtest.Server, *clientv3.Client) {
	t.Helper()
	srv := startEtcd(t)
	op := newClient(t, srv)
	ctx := t.Context()
	for _, f := range []func() error{
		func() error { _, err := op.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := op.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := op.UserAdd(ctx, "alice", "pw"); return err },
		func() error { _, err := op.RoleAdd(ctx, "alice"); return err },
		func() error {
			_, err := op.RoleGrantPermission(ctx, "alice", "/locks/alice/", clientv3.GetPrefixRangeEnd("/locks/alice/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := op.RoleGrantPermission(ctx, "alice", "/locks/w/", clientv3.GetPrefixRangeEnd("/locks/w/"), clientv3.PermissionType(clientv3.PermWrite))
			return err
		},
		func() error { _, err := op.UserGrantRole(ctx, "alice", "alice"); return err },
		func() error { _, err := op.AuthEnable(ctx); return err },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	root, _, err := countingClient(t, srv, "root", "rootpw")
	if err != nil {
		t.Fatal(err)
	}
	return srv, root
}

// TestMistakeAuth: with auth enabled in the server, a wrong password fails
// before any session (clientv3.New); a key outside the role's permission,
// or one the role may write but not read, fails Lock at once with etcd's
// permission denied; the permission revoked while the lease is held loses
// it at once with ErrRenewalRefused, not at its deadline, and the lease
// sends nothing more.
func TestMistakeAuth(t *testing.T) {
	t.Parallel()
	srv, root := authServer(t)
	if _, _, err := countingClient(t, srv, "alice", "wrong"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("clientv3.New with a wrong password = %v, want rpctypes.ErrAuthFailed", err)
	}
	cli, calls, err := countingClient(t, srv, "alice", "pw")
	if err != nil {
		t.Fatal(err)
	}
	s := newSessionOn(t, cli)
	for _, key := range []string{"/locks/bob", "/locks/w"} {
		err := lockRefused(t, s, key)
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("Lock(%q) = %v, want rpctypes.ErrPermissionDenied", key, err)
		}
		t.Logf("Lock(%q): %v", key, err)
	}
	l := mustLock(t, s, "/locks/alice")
	if _, err := root.RoleRevokePermission(t.Context(), "alice", "/locks/alice/", clientv3.GetPrefixRangeEnd("/locks/alice/")); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	err = waitLost(t, l.Signal(), hang)
	t.Logf("lost %v after the revocation: %v", time.Since(revoked).Round(time.Millisecond), err)
	if !errors.Is(err, etcdlease.ErrRenewalRefused) {
		t.Errorf("Err() = %v after the role lost its permission, want ErrRenewalRefused", err)
	}
	waitFor(t, etcdlease.Following(l), hang, "the lease to stop following its claim")
	after := calls.Load()
	time.Sleep(2 * time.Second)
	// The count holds the session's own keepalive too, etcd's client's,
	// which is not the lease's and retries every 500 ms after a failed
	// stream: 4 in 2 s, and 2 to spare. A renewer still opening streams
	// (50 ms, doubling) would add 5 more.
	if n := calls.Load() - after; n > 6 {
		t.Errorf("%d requests in 2 s after the loss, want at most the session's own (6)", n)
	}
	l.Unlock(context.Background())
}

// TestMistakeMargin: a margin under MinMargin, or of half the TTL etcd
// granted or more, is refused by Lock.
func TestMistakeMargin(t *testing.T) {
	t.Parallel()
	s := newSession(t, startEtcd(t))
	for _, m := range []time.Duration{0, time.Nanosecond, etcdlease.MinMargin - 1} {
		if err := lockRefused(t, s, lockName, etcdlease.WithMargin(m)); !strings.Contains(err.Error(), "is under its floor 1ms") {
			t.Errorf("Lock with a margin of %v = %v, want a refusal naming the floor", m, err)
		}
	}
	if err := lockRefused(t, s, lockName, etcdlease.WithMargin(ttl*time.Second/2)); !strings.Contains(err.Error(), "not less than half the TTL") {
		t.Errorf("Lock with a margin of half the TTL = %v, want a refusal naming the TTL", err)
	}
}

// TestMistakeSessionTTL: the TTL is the session's, which etcd grants: a
// TTL under etcd's minimum is raised to it (2 s with the embedded server's
// election timeout of 1 s), a TTL of 0 or less is ignored by concurrency
// (its default, 60 s), a TTL over etcd's maximum fails the session. The
// lease keeps its deadline on the TTL etcd granted, with no option: the
// least TTL, 2 s, with the default margin of a tenth, is kept past a TTL.
func TestMistakeSessionTTL(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	cli := newClient(t, srv)
	for _, tc := range []struct{ asked, granted int64 }{{1, 2}, {0, 60}, {-5, 60}} {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(tc.asked)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.TimeToLive(t.Context(), s.Lease())
		if err != nil {
			t.Fatal(err)
		}
		if resp.GrantedTTL != tc.granted {
			t.Errorf("WithTTL(%d): etcd granted %d s, want %d", tc.asked, resp.GrantedTTL, tc.granted)
		}
		l := mustLock(t, s, lockName) // no option: the default margin, TTL/10
		// For WithTTL(1), past the TTL granted, so that only the renewals,
		// every TTL/6, keep the lease with the default margin of 200 ms;
		// a second for the others, whose asked TTL (0, -5) gives no wait.
		hold := time.Second
		if tc.granted == 2 {
			hold = time.Duration(tc.granted)*time.Second + 500*time.Millisecond
		}
		time.Sleep(hold)
		if err := l.Signal().Err(); err != nil {
			t.Errorf("WithTTL(%d): Err() = %v, want the lease kept on the granted TTL", tc.asked, err)
		}
		if h := l.Health(); h.Deadline.Sub(h.Renewed) != time.Duration(tc.granted)*time.Second*9/10 {
			t.Errorf("WithTTL(%d): the deadline's span is %v, want the granted TTL less a tenth", tc.asked, h.Deadline.Sub(h.Renewed))
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if _, err := concurrency.NewSession(cli, concurrency.WithTTL(1<<40)); !errors.Is(err, rpctypes.ErrLeaseTTLTooLarge) {
		t.Errorf("WithTTL(2^40) = %v, want rpctypes.ErrLeaseTTLTooLarge", err)
	}
}

// TestMistakeKeys: a key of 1 MB is refused at once (the mutex's
// transaction holds the key several times, over the client's 2 MiB limit on
// a request, and etcd's own 1.5 MiB), and the error names the key by its
// first 64 bytes; a name that is a prefix of another's keys
// ("/locks/a" and "/locks/a/b") waits for the other's holder, as etcd's
// mutex takes every key under name + "/".
func TestMistakeKeys(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	s := newSession(t, srv)
	key := "/locks/" + strings.Repeat("k", 1<<20)
	err := lockRefused(t, s, key)
	if status.Code(err) != codes.ResourceExhausted || len(err.Error()) > 1<<10 || !strings.Contains(err.Error(), `"…`) {
		t.Errorf("Lock with a 1 MB key = %.300v (%d bytes), want gRPC's ResourceExhausted naming the key by its first 64 bytes", err, len(err.Error()))
	}
	t.Logf("a 1 MB key: %v", err)
	other := mustLock(t, newSession(t, srv), "/locks/a/b")
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if l, err := etcdlease.Lock(ctx, s, "/locks/a"); !errors.Is(err, context.DeadlineExceeded) {
		if l != nil {
			l.Unlock(t.Context())
		}
		t.Errorf("Lock(/locks/a) while /locks/a/b is held = %v, want it to wait (context.DeadlineExceeded)", err)
	}
	other.Unlock(t.Context())
}

// TestMistakeSessionEndsWhileWaiting: the waiting session's etcd lease is
// revoked while Lock waits behind another holder; etcd's mutex would wait
// on: Lock returns then, with the cause, and no deadline on its context.
func TestMistakeSessionEndsWhileWaiting(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	holder := mustLock(t, newSession(t, srv), lockName)
	defer holder.Unlock(context.Background())
	s := newSession(t, srv)
	done := make(chan error, 1)
	go func() {
		l, err := etcdlease.Lock(context.Background(), s, lockName)
		if l != nil {
			l.Unlock(context.Background())
		}
		done <- err
	}()
	waitWaiters(t, op, lockName, 2)
	revoke(t, op, s)
	err := waitFor(t, done, hang, "Lock to return after its session was revoked")
	if !errors.Is(err, etcdlease.ErrSessionExpired) && !errors.Is(err, etcdlease.ErrSessionClosed) {
		t.Errorf("Lock whose session was revoked while it waited = %v, want ErrSessionExpired or ErrSessionClosed", err)
	}
	t.Logf("revoked while waiting: %v", err)
}

// waitWaiters returns once n keys are under name + "/": the holder's and
// the waiters'.
func waitWaiters(t *testing.T, op *clientv3.Client, name string, n int64) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for {
		resp, err := op.Get(t.Context(), name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys under %s/ after %v, want %d", resp.Count, name, hang, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// claims are Lock and Campaign, as a test makes them on a name.
var claims = map[string]func(ctx context.Context, s *concurrency.Session, name string) (*etcdlease.Lease, error){
	"Lock": func(ctx context.Context, s *concurrency.Session, name string) (*etcdlease.Lease, error) {
		return etcdlease.Lock(ctx, s, name)
	},
	"Campaign": func(ctx context.Context, s *concurrency.Session, name string) (*etcdlease.Lease, error) {
		return etcdlease.Campaign(ctx, s, name, "v")
	},
}

// waitBehind starts claim by session s on name in a goroutine, once holder,
// another session, holds name, and returns when s's key is there: the
// claim then waits behind the holder. Its error goes to the channel it
// returns; a lease it is given is released.
func waitBehind(t *testing.T, op *clientv3.Client, holder, s *concurrency.Session, ctx context.Context, name string,
	claim func(context.Context, *concurrency.Session, string) (*etcdlease.Lease, error)) <-chan error {
	t.Helper()
	if _, err := claim(t.Context(), holder, name); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := claim(ctx, s, name)
		if l != nil {
			l.Unlock(context.Background())
		}
		done <- err
	}()
	waitWaiters(t, op, name, 2)
	return done
}

// TestMistakeClusterGoneWhileWaiting: the cluster stops while Lock or
// Campaign waits behind another holder, with a context of 3 s: the call
// returns once its context has ended and its session has too (etcd's
// client gives up on the session's etcd lease after its TTL), not when the
// cluster answers again, and its error wraps the context's error and the
// last renewal stream's gRPC error. etcd's own mutex and election, on their
// way out, delete the waiting key with the client's context, and wait for a
// cluster that answers again.
func TestMistakeClusterGoneWhileWaiting(t *testing.T) {
	t.Parallel()
	for call, claim := range claims {
		t.Run(call, func(t *testing.T) {
			t.Parallel()
			srv, op := startEtcdWithOp(t)
			s := newSession(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			done := waitBehind(t, op, newSession(t, srv), s, ctx, lockName, claim)
			stopped := make(chan struct{})
			go func() {
				srv.Close()
				close(stopped)
			}()
			start := time.Now()
			err := waitFor(t, done, hang, call+" to return after its context and session ended, the cluster stopped")
			t.Logf("%s returned %v after the cluster stopped: %v", call, time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s = %v, want it to wrap context.DeadlineExceeded", call, err)
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s = %v, want it to wrap the last renewal stream's gRPC error (Unavailable)", call, err)
			}
			op.Close()
			s.Client().Close()
			waitFor(t, stopped, 3*hang, "etcd to stop")
		})
	}
}

// TestMistakeCutWhileWaiting: Lock or Campaign cut by its context while it
// waits behind another holder, the cluster up: the error wraps the
// context's cause and its error, and the waiting key is deleted before the
// call returns, so that it does not take the claim for a session that no
// longer waits.
func TestMistakeCutWhileWaiting(t *testing.T) {
	t.Parallel()
	for call, claim := range claims {
		t.Run(call, func(t *testing.T) {
			t.Parallel()
			srv, op := startEtcdWithOp(t)
			s := newSession(t, srv)
			why := errors.New("the caller gave up")
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := waitBehind(t, op, newSession(t, srv), s, ctx, lockName, claim)
			cancel(why)
			err := waitFor(t, done, hang, call+" to return once its context was cancelled")
			if !errors.Is(err, why) || !errors.Is(err, context.Canceled) {
				t.Errorf("%s = %v, want it to wrap the context's cause and context.Canceled", call, err)
			}
			resp, err := op.Get(t.Context(), sessionKey(lockName, s))
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 0 {
				t.Errorf("the waiting key of %s is still there after it returned, want it deleted", call)
			}
		})
	}
}

// TestMistakeRenewalsFailWhileWaiting: the renewals of the waiting
// session's etcd lease fail while Lock or Campaign waits behind another
// holder, with no deadline on its context: its network goes silent (the
// local deadline passes: ErrRenewalUnconfirmed), or its role may only read
// the keys any more (etcd refuses the renewal: ErrRenewalRefused).
// The call returns then, with the cause.
func TestMistakeRenewalsFailWhileWaiting(t *testing.T) {
	t.Parallel()
	for call, claim := range claims {
		t.Run(call+", silent", func(t *testing.T) {
			t.Parallel()
			srv, op := startEtcdWithOp(t)
			px := startProxy(t, srv.Endpoint())
			s := newSessionOn(t, proxyClient(t, px))
			done := waitBehind(t, op, newSession(t, srv), s, context.Background(), lockName, claim)
			px.Drop(faultnet.Both)
			start := time.Now()
			err := waitFor(t, done, 2*hang, call+" to return after its renewals went unanswered")
			t.Logf("%s returned %v after its network went silent: %v", call, time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, etcdlease.ErrRenewalUnconfirmed) {
				t.Errorf("%s = %v, want ErrRenewalUnconfirmed", call, err)
			}
			px.Heal()
		})
		t.Run(call+", refused", func(t *testing.T) {
			t.Parallel()
			srv, root := authServer(t)
			cli, _, err := countingClient(t, srv, "alice", "pw")
			if err != nil {
				t.Fatal(err)
			}
			done := waitBehind(t, root, newSessionOn(t, cli), newSessionOn(t, cli), context.Background(), "/locks/alice", claim)
			// Read only: the wait's watch goes on, and etcd refuses to
			// renew a lease whose keys the role may not write.
			if _, err := root.RoleGrantPermission(t.Context(), "alice", "/locks/alice/", clientv3.GetPrefixRangeEnd("/locks/alice/"), clientv3.PermissionType(clientv3.PermRead)); err != nil {
				t.Fatal(err)
			}
			err = waitFor(t, done, hang, call+" to return after etcd refused its renewals")
			t.Logf("%s, its renewals refused: %v", call, err)
			if !errors.Is(err, etcdlease.ErrRenewalRefused) {
				t.Errorf("%s = %v, want ErrRenewalRefused", call, err)
			}
		})
	}
}
