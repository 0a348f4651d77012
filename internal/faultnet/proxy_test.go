package faultnet_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/internal/faultnet"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is a line echo server that also counts the lines it received.
type server struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	lines int
	conns []net.Conn
}

func startServer(t *testing.T) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.mu.Lock()
					s.lines++
					s.mu.Unlock()
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *server) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines
}

// waitReceived waits until the server has received n lines.
func (s *server) waitReceived(t *testing.T, n int) {
	t.Helper()
	for i := 0; s.received() < n; i++ {
		if i == 5000 {
			t.Fatalf("server received %d lines, want %d", s.received(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func startProxy(t *testing.T, target string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *faultnet.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// echo sends a line and reads its echo, within a second.
func echo(c net.Conn, r *bufio.Reader, line string) error {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	defer c.SetReadDeadline(time.Time{})
	got, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return errors.New("echo " + got + ", want " + line)
	}
	return nil
}

// silent reports whether nothing arrives on r within d, the connection
// still open.
func silent(t *testing.T, c net.Conn, r *bufio.Reader, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	got, err := r.ReadString('\n')
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read = %q, %v; want nothing until the deadline", got, err)
	}
}

func TestForwards(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s.ln.Addr().String())
	if p.Target() != s.ln.Addr().String() {
		t.Errorf("Target() = %q, want %q", p.Target(), s.ln.Addr())
	}
	c, r := dial(t, p)
	for _, line := range []string{"a", "bb", "ccc"} {
		if err := echo(c, r, line); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDrop(t *testing.T) {
	cases := []struct {
		dir         faultnet.Direction
		serverHears bool
		clientHears bool
		description string
	}{
		{faultnet.Both, false, false, "silent both ways"},
		{faultnet.ToServer, false, false, "requests lost"},
		{faultnet.ToClient, true, false, "replies lost"},
	}
	for _, tc := range cases {
		t.Run(tc.dir.String(), func(t *testing.T) {
			s := startServer(t)
			p := startProxy(t, s.ln.Addr().String())
			c, r := dial(t, p)
			if err := echo(c, r, "before"); err != nil {
				t.Fatal(err)
			}
			p.Drop(tc.dir)
			if _, err := c.Write([]byte("during\n")); err != nil {
				t.Fatal(err)
			}
			if tc.serverHears {
				s.waitReceived(t, 2)
			}
			silent(t, c, r, 200*time.Millisecond)
			if got, want := s.received() == 2, tc.serverHears; got != want {
				t.Errorf("%s: server received the line: %v, want %v", tc.description, got, want)
			}
			// The connection stayed open: once healed and cut, a new one works.
			p.Heal()
			p.Cut()
			c2, r2 := dial(t, p)
			if err := echo(c2, r2, "after"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHealResetsAHole heals a drop: the connection that lost bytes is
// reset at the next byte in the direction that lost them, and no byte
// after the hole reaches the other end.
func TestHealResetsAHole(t *testing.T) {
	for _, dir := range []faultnet.Direction{faultnet.ToServer, faultnet.ToClient} {
		t.Run(dir.String(), func(t *testing.T) {
			s := startServer(t)
			p := startProxy(t, s.ln.Addr().String())
			c, r := dial(t, p)
			if err := echo(c, r, "before"); err != nil {
				t.Fatal(err)
			}
			p.Drop(dir)
			if _, err := c.Write([]byte("during\n")); err != nil {
				t.Fatal(err)
			}
			if dir == faultnet.ToClient {
				s.waitReceived(t, 2) // its echo is the hole
			}
			silent(t, c, r, 100*time.Millisecond)
			p.Heal()
			// The write may meet the reset already; what matters is what
			// the client reads.
			c.Write([]byte("after\n"))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := r.ReadString('\n')
			if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("after the heal, read %q, %v; want the connection reset", got, err)
			}
			if n, want := s.received(), map[faultnet.Direction]int{faultnet.ToServer: 1, faultnet.ToClient: 3}[dir]; n != want {
				t.Errorf("the server received %d lines, want %d", n, want)
			}
			c2, r2 := dial(t, p)
			if err := echo(c2, r2, "again"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDropAppliesToNewConnections(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s.ln.Addr().String())
	p.Drop(faultnet.Both)
	c, r := dial(t, p)
	if _, err := c.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	silent(t, c, r, 200*time.Millisecond)
	if n := s.received(); n != 0 {
		t.Errorf("server received %d lines through a silent proxy", n)
	}
}

func TestDelay(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	const d = 100 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if err := echo(c, r, "slow"); err != nil {
		t.Fatal(err)
	}
	// A lower bound only: the proxy holds each byte at least d each way.
	if rtt := time.Since(start); rtt < 2*d {
		t.Errorf("round trip took %v through a delay of %v each way, want at least %v", rtt, d, 2*d)
	}
	p.Heal()
	if err := echo(c, r, "fast"); err != nil {
		t.Fatal(err)
	}
}

func TestDelayKeepsOrder(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	p.Delay(20 * time.Millisecond)
	for i := range 50 {
		line := string(rune('a'+i%26)) + "-line"
		if err := echo(c, r, line); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
	}
}

func TestCut(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	if err := echo(c, r, "before"); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Cut = %v, want the connection closed", err)
	}
	c2, r2 := dial(t, p)
	if err := echo(c2, r2, "after"); err != nil {
		t.Fatal(err)
	}
}

func TestCleanCloseGoesThrough(t *testing.T) {
	s := startServer(t)
	p := startProxy(t, s.ln.Addr().String())
	c, r := dial(t, p)
	if _, err := c.Write([]byte("last\n")); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "last\n" {
		t.Fatalf("read = %q, %v; want the echo then EOF", got, err)
	}
}

func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p := startProxy(t, target)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return // the reset came before the dial returned
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a proxy to a closed port = %v, want the connection closed", err)
	}
}

func TestMisuse(t *testing.T) {
	p := startProxy(t, "127.0.0.1:1")
	for name, f := range map[string]func(){
		"Drop":  func() { p.Drop(faultnet.Direction(8)) },
		"Delay": func() { p.Delay(-time.Second) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		})
	}
}
