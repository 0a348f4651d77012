// Package redistest runs real Redis servers for the tests, the fault trials
// and the demo of package redislease: a primary, replicas whose replication
// link goes through a [faultnet.Proxy] so that it can be cut, and three
// Sentinels watching them; or a Cluster of primaries and replicas.
//
// Every server runs the binary of the Debian package redis-server (and
// redis-sentinel for the Sentinels) on a loopback port of its own, in a
// temporary folder of its own, without persistence, and is killed when the
// test ends, or when the test process dies. A missing binary fails the test
// naming its package; `make redis-deps` installs both. The environment
// variables REDIS_SERVER and REDIS_SENTINEL name other binaries.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// binary returns the path of the binary named by the environment variable
// env, or of name on the PATH or in /usr/bin, or an error naming pkg.
func binary(env, name, pkg string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if p := filepath.Join("/usr/bin", name); isExec(p) {
		return p, nil
	}
	return "", fmt.Errorf("redistest: %s not found: install the Debian package %s (make redis-deps, or apt-get install %s), or set %s to its path", name, pkg, pkg, env)
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&0o111 != 0
}

// ServerBinary returns the path of redis-server, or an error naming its
// Debian package.
func ServerBinary() (string, error) { return binary("REDIS_SERVER", "redis-server", "redis-server") }

// SentinelBinary returns the path of redis-sentinel, or an error naming its
// Debian package.
func SentinelBinary() (string, error) {
	return binary("REDIS_SENTINEL", "redis-sentinel", "redis-sentinel")
}

// FreePort returns a loopback port nothing listens on now. A server may
// take it before the caller listens on it: a test that needs a port that
// stays unused, to dial it and be refused, may use it; a server must not.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// A Server is one redis-server or redis-sentinel process. Its port is its
// own from NewServer to Close (see [reservePort]), across Kill and Start. Its
// methods are safe for concurrent use.
type Server struct {
	Port int
	Dir  string
	bin  string
	args []string // the flags, or the config file, that name the port

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	closed bool
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// StartServer starts a redis-server with the flags extra (such as
// "--replicaof", "127.0.0.1", "6379") and closes it when tb ends.
func StartServer(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, err := NewServer(tb.TempDir(), extra...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// NewServer starts a redis-server in dir with the flags extra; the caller
// stops it with Close.
func NewServer(dir string, extra ...string) (*Server, error) {
	bin, err := ServerBinary()
	if err != nil {
		return nil, err
	}
	return startOnOwnPort(dir, bin, func(port int) ([]string, error) {
		return append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
			"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
			"--logfile", filepath.Join(dir, "redis.log"),
		}, extra...), nil
	})
}

// startOnOwnPort starts bin in dir with the arguments args returns for a
// port reserved for it, and tries another port if something outside this
// package took that one first.
func startOnOwnPort(dir, bin string, args func(port int) ([]string, error)) (*Server, error) {
	for try := 0; ; try++ {
		port, err := reservePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, Dir: dir, bin: bin}
		if s.args, err = args(port); err == nil {
			err = s.Start()
		}
		if err == nil {
			return s, nil
		}
		releasePort(port)
		if !errors.Is(err, errAddrInUse) || try == 2 {
			return nil, err
		}
	}
}

// errAddrInUse is why a server that exited at start could not listen.
var errAddrInUse = errors.New("address already in use")

// Start starts the process again on the same port, with the same flags:
// without persistence, it comes back empty. It waits until it answers PING.
func (s *Server) Start() error {
	s.mu.Lock()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		cmd.Wait()
		close(exited)
	}()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		if err == nil {
			// The process that answered must be this one, not one of
			// another test's that took the port while this one failed to.
			err = s.isAnswering(ctx, c, cmd.Process.Pid)
		}
		cancel()
		if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			if strings.Contains(string(log), "Address already in use") {
				return fmt.Errorf("redistest: %s exited at start: port %d: %w", s.bin, s.Port, errAddrInUse)
			}
			return fmt.Errorf("redistest: %s exited at start: %s", s.bin, log)
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redistest: %s did not answer PING within 10 s: %w", s.Addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isAnswering returns nil if the server c reaches is the process pid.
func (s *Server) isAnswering(ctx context.Context, c *redis.Client, pid int) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok && v == strconv.Itoa(pid) {
			return nil
		}
	}
	return fmt.Errorf("redistest: %s is served by another process than %d", s.Addr(), pid)
}

// Kill kills the process (SIGKILL, after a SIGCONT in case it was paused)
// and waits for it to exit. Killing a server not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-exited
}

// Close kills the process and gives up its port. Successive calls do
// nothing.
func (s *Server) Close() {
	s.Kill()
	s.mu.Lock()
	port := s.Port
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if !closed {
		releasePort(port)
	}
}

// Pause stops the process with SIGSTOP: its connections stay open and
// silent.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: not started")
	}
	return s.cmd.Process.Signal(sig)
}

// Client returns a client of its own to the server, closed when tb ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	tb.Cleanup(func() { c.Close() })
	return c
}
