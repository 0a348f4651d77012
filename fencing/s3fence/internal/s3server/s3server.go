// Package s3server runs versitygw, the S3 gateway of the s3fence tests, on
// its posix backend in a temporary folder, in a process of its own. It
// runs the binary that make s3-versitygw builds and keeps in the user's
// cache folder (zukhruf-lease/versitygw-VERSION; the environment variable
// VERSITYGW names another file), and builds it there first if it is
// missing, from the module beside issuers/s3lease's test server, which
// pins VERSION.
package s3server

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/zukhruf/lease/internal/gobin"
)

// The root user's keys.
const (
	AccessKey = "s3server-access"
	SecretKey = "s3server-secret-key"
)

// A Server is one versitygw process.
type Server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a Server in a new temporary folder, with a bucket named
// bucket.
func Start(bucket string) (*Server, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "s3server")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{addr: addr, dir: dir, done: make(chan struct{})}
	log, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "--access", AccessKey, "--secret", SecretKey, "--port", addr, "--quiet", "posix", filepath.Join(dir, "data"))
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3server: start versitygw: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	c := Client(addr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			b, _ := os.ReadFile(filepath.Join(dir, "versitygw.log"))
			s.Close()
			return nil, fmt.Errorf("s3server: versitygw exited at start: %s", b)
		default:
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("s3server: versitygw on %s did not answer within 30 s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return s.addr }

// Close kills the server and removes its folder.
func (s *Server) Close() error {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	return os.RemoveAll(s.dir)
}

// Client returns a minio client of the root user for addr.
func Client(addr string) *minio.Client {
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		panic("s3server: " + err.Error())
	}
	return c
}

// versitygw is the binary, built by package gobin from the module beside
// issuers/s3lease's test server, as make s3-versitygw builds it.
var versitygw = gobin.Binary{
	Name:    "versitygw",
	Module:  "github.com/versity/versitygw",
	Package: "github.com/versity/versitygw/cmd/versitygw",
	Dir:     gobin.Beside("../../../../issuers/s3lease/internal/s3test/versitygw"),
	Env:     "VERSITYGW",
	Make:    "s3-versitygw",
	Took:    "a cold build takes minutes",
}

// binary returns the versitygw binary, building it if it is missing.
func binary() (string, error) {
	return versitygw.Ensure(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
}
