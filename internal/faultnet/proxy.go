// Package faultnet gives tests a loopback TCP proxy whose network faults
// they control: bytes dropped in one direction or both while connections
// stay open, latency, and connections cut.
//
// Every issuer's fault tests put one [Proxy] between a client and its
// server (or between two servers) and turn faults on and off while holders
// work through it.
package faultnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A Direction names the bytes of a proxied connection that a fault applies to.
type Direction uint8

const (
	// ToServer is the bytes the client sends.
	ToServer Direction = 1 << iota
	// ToClient is the bytes the server sends.
	ToClient
	// Both is the bytes of both directions.
	Both = ToServer | ToClient
)

func (d Direction) String() string {
	switch d {
	case 0:
		return "none"
	case ToServer:
		return "to-server"
	case ToClient:
		return "to-client"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// A Proxy forwards each connection accepted on a loopback port to a target
// address, through the faults set on it. Its methods are safe for
// concurrent use; a fault applies from the moment its method returns, to
// the connections open then and to those accepted later.
//
// A stream whose bytes were dropped is broken for good: no protocol can
// read past the hole. Once healed, the proxy resets such a connection at
// the next byte it would forward in the direction that lost bytes, rather
// than deliver the stream with a hole; call [Proxy.Cut] after Heal to reset
// them all at once, so that the clients reconnect.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	drop   Direction
	delay  time.Duration
	conns  map[*pair]struct{}
	closed bool
}

// pair is one proxied connection: the accepted client side and the dialed
// server side.
type pair struct {
	client, server net.Conn
	open           atomic.Int32  // directions not yet at their end
	holes          atomic.Uint32 // the Directions that dropped bytes
}

func (p *pair) close() {
	// A zero linger makes the close a reset, as a cut cable or a failed
	// middlebox looks to both ends.
	for _, c := range []net.Conn{p.client, p.server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Listen starts a proxy on 127.0.0.1 at a free port that forwards each
// connection it accepts to target.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultnet: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*pair]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients dial, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Drop discards, from now on, every byte going in d, while the connections
// stay open; Drop(0) discards nothing. Each call replaces the last one.
func (p *Proxy) Drop(d Direction) {
	if d&^Both != 0 {
		panic("faultnet: Drop called with an unknown Direction")
	}
	p.mu.Lock()
	p.drop = d
	p.mu.Unlock()
}

// Delay forwards, from now on, each byte d after the proxy read it, in both
// directions and in order; Delay(0) adds nothing. Bytes read before the
// call keep the delay they were read with.
func (p *Proxy) Delay(d time.Duration) {
	if d < 0 {
		panic("faultnet: Delay called with a negative duration")
	}
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Heal removes every fault: Drop(0) and Delay(0).
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.drop, p.delay = 0, 0
	p.mu.Unlock()
}

// Cut resets every open connection now. The proxy goes on accepting new
// ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = make(map[*pair]struct{})
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

// Close stops listening, resets every connection and waits until the
// proxy's goroutines have returned.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

// faults returns what applies to bytes going in dir, read now.
func (p *Proxy) faults(dir Direction) (drop bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drop&dir != 0, p.delay
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			// The target refused: the client sees the same.
			(&pair{client: client, server: nopConn{}}).close()
			continue
		}
		c := &pair{client: client, server: server}
		c.open.Store(2)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.forward(c, client, server, ToServer)
		go p.forward(c, server, client, ToClient)
	}
}

// chunk is bytes read from one side, due to be written to the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// forward copies from src to dst through the faults set for dir. A reader
// and a writer goroutine meet in a queue, so that a delay holds bytes in
// order without slowing the reads that stamp them.
func (p *Proxy) forward(c *pair, src, dst net.Conn, dir Direction) {
	defer p.wg.Done()
	queue := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range queue {
			if wait := time.Until(ch.due); wait > 0 {
				time.Sleep(wait)
			}
			if _, err := dst.Write(ch.b); err != nil {
				c.close()
				for range queue {
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			drop, delay := p.faults(dir)
			switch {
			case drop:
				c.holes.Or(uint32(dir))
			case c.holes.Load()&uint32(dir) != 0:
				// The bytes after a hole: the stream is broken.
				err = errHole
			default:
				b := append([]byte(nil), buf[:n]...)
				queue <- chunk{b: b, due: time.Now().Add(delay)}
			}
		}
		if err != nil {
			close(queue)
			<-done
			if errors.Is(err, io.EOF) {
				// A clean close goes through, after the bytes before
				// it; the other direction goes on until its own end.
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				if c.open.Add(-1) > 0 {
					return
				}
				_ = c.client.Close()
				_ = c.server.Close()
			} else {
				c.close()
			}
			p.forget(c)
			return
		}
	}
}

func (p *Proxy) forget(c *pair) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// errHole ends the forwarding of a stream that dropped bytes, with a reset.
var errHole = errors.New("faultnet: bytes after a hole")

// nopConn stands for a server side that was never dialed.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }
