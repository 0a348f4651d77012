package etcdlease_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{px.ln.Addr().String()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
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
	err = checkLost(t, sig, hang, lockName, etcdlease.ErrKeyDeleted, "deleted")
	checkUnlockAfterLoss(t, l, err)
}
