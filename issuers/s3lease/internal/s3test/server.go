package s3test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The root user's keys of every Server.
const (
	AccessKey = "s3test-access"
	SecretKey = "s3test-secret-key"
)

// A Server is one versitygw process on the posix backend, serving the
// folder it was started on at 127.0.0.1:Port. Its methods are safe for
// concurrent use.
type Server struct {
	Port int
	bin  string
	dir  string // the backend's folder
	logf string // versitygw's output

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts a Server in a temporary folder of tb and kills it when tb
// ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := NewServer(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Kill)
	return s
}

// NewServer starts a Server whose backend lives under dir, building the
// binary first if it is missing (see [Ensure]); the caller kills it with
// Kill.
func NewServer(dir string) (*Server, error) {
	bin, err := Ensure(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	s := &Server{bin: bin, dir: data, logf: filepath.Join(dir, "versitygw.log")}
	for range 5 {
		s.Port, err = freePort()
		if err != nil {
			return nil, err
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// Addr returns "127.0.0.1:Port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Dir returns the backend's folder: one folder a bucket, one file an object.
func (s *Server) Dir() string { return s.dir }

func (s *Server) start() error {
	out, err := os.OpenFile(s.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("s3test: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(s.bin, "--access", AccessKey, "--secret", SecretKey, "--port", s.Addr(), "--quiet", "posix", s.dir)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("s3test: start versitygw: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	c := Client(s.Addr())
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ListBuckets(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logf)
			return fmt.Errorf("s3test: versitygw on %s exited at start: %s", s.Addr(), tail(b, 10))
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("s3test: versitygw on %s did not answer within 30 s: %w", s.Addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server's process (SIGKILL) and waits for it to exit.
// Killing a server that is not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Pause stops the server's process (SIGSTOP): it keeps its connections and
// answers nothing until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		syscall.Kill(-s.cmd.Process.Pid, sig)
	}
}

// Restart starts the server again on the same folder and port after Kill,
// or kills it first if it runs.
func (s *Server) Restart() error {
	s.Kill()
	var err error
	for range 50 { // the port may linger a moment after the kill
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Bucket makes a bucket of the given name on the server.
func (s *Server) Bucket(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Client(s.Addr()).MakeBucket(ctx, name, minio.MakeBucketOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
		return fmt.Errorf("s3test: make bucket %s: %w", name, err)
	}
	return nil
}

// Client returns a minio client of the root user for the server at addr
// (a Server's Addr, or a proxy's in front of it).
func Client(addr string) *minio.Client {
	c, err := minio.New(addr, &minio.Options{
		Creds:  credentials.NewStaticV4(AccessKey, SecretKey, ""),
		Region: "us-east-1",
	})
	if err != nil {
		panic("s3test: " + err.Error()) // only a malformed address fails, a bug of the caller
	}
	return c
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("s3test: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
