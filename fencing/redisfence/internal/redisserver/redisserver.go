// Package redisserver starts a standalone redis-server from the Debian
// package redis-server on a free loopback port, for the tests of
// redisfence.
package redisserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bin is redis-server's path; the environment variable REDIS_SERVER
// overrides it.
var Bin = "/usr/bin/redis-server"

// Server is a redis-server started by this process, without persistence.
type Server struct {
	cmd    *exec.Cmd
	dir    string
	addr   string
	exited chan struct{}
}

// Start starts a server; the caller must Close it.
func Start() (*Server, error) {
	bin := Bin
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		bin = b
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("redisserver: %s not found (set REDIS_SERVER): install the Debian package redis-server: %w", bin, err)
	}
	dir, err := os.MkdirTemp("", "redisserver-")
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		s := &Server{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), exited: make(chan struct{})}
		s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		if err = s.cmd.Start(); err == nil {
			go func() { _ = s.cmd.Wait(); close(s.exited) }()
			if err = s.waitReady(); err == nil {
				return s, nil
			}
			s.stop()
		}
		if try == 2 {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redisserver: %w", err)
		}
	}
}

func (s *Server) waitReady() error {
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second) // a guard against a hang, not a measure
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("redis-server exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return s.addr }

func (s *Server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Close stops the server and removes its folder.
func (s *Server) Close() error {
	s.stop()
	return os.RemoveAll(s.dir)
}
