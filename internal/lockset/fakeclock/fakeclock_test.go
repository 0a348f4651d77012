package fakeclock

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRedisClockRuns starts Debian's redis-server on a clock and checks,
// by the server's TIME, that its wall clock runs at each rate set and goes
// on without a jump across each change and across a restart; and that a
// key's expiry follows it.
func TestRedisClockRuns(t *testing.T) {
	dir := t.TempDir()
	c, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := startRedis(t, c, dir)

	// Reads the server's clock against the true one: the server's time,
	// and the true time halfway through the call.
	read := func() (Reading, error) {
		sent := time.Now()
		reply := srv.do(t, "TIME")
		answered := time.Now()
		sec, _ := strconv.ParseInt(reply[0], 10, 64)
		usec, _ := strconv.ParseInt(reply[1], 10, 64)
		return Reading{Shows: time.Unix(sec, usec*1000), Sent: sent, Answered: answered}, nil
	}
	// A reading of the server's clock may be off the line by its
	// uncertainty; the line itself, by what the last SetRate left: the
	// gap it read, and that reading's uncertainty.
	var settled time.Duration
	setRate := func(rate float64) {
		t.Helper()
		off, uncertainty, err := c.SetRate(rate, read)
		if err != nil {
			t.Fatal(err)
		}
		if off.Abs() > uncertainty+time.Microsecond {
			t.Fatalf("rate %v: the server's clock is %v off the Clock's once set, read within %v", rate, off, uncertainty)
		}
		settled = off.Abs() + uncertainty
	}
	// within wants the server's clock where the Clock says it is.
	within := func(what string) time.Time {
		t.Helper()
		off, uncertainty, err := c.measure(read)
		if err != nil {
			t.Fatal(err)
		}
		if off.Abs() > settled+uncertainty+time.Microsecond {
			t.Fatalf("%s: the server's clock is %v off the Clock's, read within %v, set within %v", what, off, uncertainty, settled)
		}
		r, _ := read()
		return r.Shows
	}
	within("at rate 1")
	for _, rate := range []float64{2, 0.5, 4, 1.05, 1} {
		setRate(rate)
		r0, _ := Best(read)
		time.Sleep(time.Second)
		r1, _ := Best(read)
		got, uncertainty := Rate(r0, r1)
		if math.Abs(got-rate) > uncertainty {
			t.Errorf("rate %v: the server's clock ran at %.4f ± %.4f", rate, got, uncertainty)
		}
		within(fmt.Sprintf("at rate %v", rate))
		t.Logf("rate %v: the server's clock ran at %.4f ± %.4f", rate, got, uncertainty)
	}

	// A restart goes on from the clock the killed server had.
	setRate(3)
	time.Sleep(500 * time.Millisecond)
	setRate(1)
	before := within("before a restart")
	srv.kill(t)
	srv = startRedis(t, c, dir)
	if after := within("after a restart"); after.Before(before) {
		t.Fatalf("the clock went back across a restart: %v, then %v", before, after)
	}

	// A key expires by the server's clock: after a true time e, a key of
	// 10 s has 10 s − 4e left at rate 4, and 10 s − e at rate 1, give or
	// take the calls' times.
	for _, rate := range []float64{4, 1} {
		setRate(rate)
		sent := time.Now()
		srv.do(t, "SET", "k", "v", "PX", "10000")
		answered := time.Now()
		time.Sleep(500 * time.Millisecond)
		sent2 := time.Now()
		reply := srv.do(t, "PTTL", "k")
		answered2 := time.Now()
		left, _ := strconv.ParseInt(reply[0], 10, 64)
		most := 10000 - rate*float64(sent2.Sub(answered))/1e6 + 1
		least := 10000 - rate*float64(answered2.Sub(sent))/1e6 - 1
		if float64(left) > most || float64(left) < least {
			t.Errorf("rate %v: a key of 10 s has %d ms left, want %.0f to %.0f", rate, left, least, most)
		}
		t.Logf("rate %v: a key of 10 s has %d ms left after %v", rate, left, sent2.Sub(answered).Round(time.Millisecond))
	}
}

type redisServer struct {
	cmd  *exec.Cmd
	conn net.Conn
	r    *bufio.Reader
}

func startRedis(t *testing.T, c *Clock, dir string) *redisServer {
	t.Helper()
	bin := "/usr/bin/redis-server"
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		bin = b
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: install the Debian package redis-server (make redis-deps): %v", bin, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Env = append(os.Environ(), c.Env()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	c.Starting()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &redisServer{cmd: cmd}
	t.Cleanup(func() { s.kill(t) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			s.conn, s.r = conn, bufio.NewReader(conn)
			if reply := s.do(t, "PING"); reply[0] == "PONG" {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on the clock does not answer: %v; its output: %s", err, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *redisServer) kill(t *testing.T) {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	if s.conn != nil {
		s.conn.Close()
	}
}

// do sends a command and returns its reply's lines: a simple string, an
// integer, or an array's bulk strings.
func (s *redisServer) do(t *testing.T, args ...string) []string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	s.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	line := s.readLine(t)
	switch line[0] {
	case '+', ':':
		return []string{line[1:]}
	case '*':
		n, _ := strconv.Atoi(line[1:])
		var out []string
		for range n {
			s.readLine(t) // $len
			out = append(out, s.readLine(t))
		}
		return out
	}
	t.Fatalf("%v: %s", args, line)
	return nil
}

func (s *redisServer) readLine(t *testing.T) string {
	t.Helper()
	line, err := s.r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(line, "\r\n")
}
