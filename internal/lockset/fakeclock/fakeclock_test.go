package fakeclock

import (
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

	"github.com/redis/go-redis/v9"
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
		shows, err := srv.rdb.Time(t.Context()).Result()
		return Reading{Shows: shows, Sent: sent, Answered: time.Now()}, err
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
	srv.kill()
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
		if err := srv.rdb.Set(t.Context(), "k", "v", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		answered := time.Now()
		time.Sleep(500 * time.Millisecond)
		sent2 := time.Now()
		pttl, err := srv.rdb.PTTL(t.Context(), "k").Result()
		answered2 := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		left := pttl.Milliseconds()
		most := 10000 - rate*float64(sent2.Sub(answered))/1e6 + 1
		least := 10000 - rate*float64(answered2.Sub(sent))/1e6 - 1
		if float64(left) > most || float64(left) < least {
			t.Errorf("rate %v: a key of 10 s has %d ms left, want %.0f to %.0f", rate, left, least, most)
		}
		t.Logf("rate %v: a key of 10 s has %d ms left after %v", rate, left, sent2.Sub(answered).Round(time.Millisecond))
	}
}

type redisServer struct {
	cmd *exec.Cmd
	rdb *redis.Client
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
	s := &redisServer{cmd: cmd, rdb: redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})}
	t.Cleanup(s.kill)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.rdb.Ping(t.Context()).Err()
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on the clock does not answer: %v; its output: %s", err, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *redisServer) kill() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	s.rdb.Close()
}
