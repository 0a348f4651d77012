package etcdlease_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/docs/examples/etcdlease"
)

// proxy forwards loopback TCP connections to an etcd server and can cut
// every open connection while it goes on accepting new ones: a network blip.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// client returns a client that reaches etcd only through p, closed when
// the test ends.
func (p *proxy) client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{p.ln.Addr().String()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// cut closes every connection open now.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// A connection that drops and comes straight back loses nothing, and the
// lease goes on following its claim: a deletion after the blip is reported
// as a deletion.
func TestLockKeptThroughConnectionBlip(t *testing.T) {
	t.Parallel()
	srv, op := startEtcdWithOp(t)
	px := startProxy(t, srv.Endpoint())
	cli := px.client(t)
	l := mustLock(t, newSessionOn(t, cli), lockName)
	sig := l.Signal()

	px.cut()
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
		s, err := concurrency.NewSession(px.client(t), concurrency.WithTTL(60))
		if err != nil {
			t.Fatal(err)
		}
		l := mustLock(t, s, lockName)
		// Nothing answers at the proxy's address any more.
		px.ln.Close()
		px.cut()
		checkLost(t, l.Signal(), hang, lockName, etcdlease.ErrClusterLost, "TRANSIENT_FAILURE")
		waitFor(t, etcdlease.Following(l), hang, "the lease to stop following its claim after the loss")
	})
}
