package healthtest

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

// Redis is a redis-server this package started.
type Redis struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
}

// StartRedis starts redis-server (REDIS_SERVER names another binary) on a
// free loopback port, with no persistence, and waits until it answers.
func StartRedis() (*Redis, error) {
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("healthtest: %s not found: install the Debian package redis-server (make redis-deps): %w", bin, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "healthtest-redis")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &Redis{Addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, dir: dir}
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r, nil
		}
		if time.Since(start) > 30*time.Second {
			r.Stop()
			return nil, fmt.Errorf("healthtest: redis-server at %s did not answer in 30 s: %w", r.Addr, err)
		}
	}
}

// Stop kills the server and removes its folder.
func (r *Redis) Stop() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
	os.RemoveAll(r.dir)
}
