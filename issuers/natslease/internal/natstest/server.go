package natstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease/issuers/natslease/internal/natstest/natsbin"
)

// The users of every server (see the package doc).
const (
	App = "app" // APP, with JetStream and every permission
	RO  = "ro"  // APP, without publish to $KV.>
	// Revocable is a user of APP with every permission until
	// [Server.RevokePublish] takes its publish to $KV.> away.
	Revocable = "revocable"
	NoJS      = "nojs" // NOJS, an account without JetStream
	Sys       = "sys"  // the system account
)

// ReadyWithin bounds a server's start, and a cluster's until JetStream
// answers.
const ReadyWithin = 30 * time.Second

// A Server is a nats-server process with JetStream.
type Server struct {
	Name string
	Port int    // the clients' port; the cluster's is Port+10000
	Dir  string // its folder: the config, the log, the JetStream store

	bin  string
	conf string

	mu      sync.Mutex
	revoked bool // Revocable may not publish to $KV.>
	cmd     *exec.Cmd
	exited  chan struct{}
	closed  bool
}

// newServer reserves a port and a folder for a server; it starts nothing.
func newServer(dir, name string) (*Server, error) {
	bin, err := natsbin.Ensure(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	if err != nil {
		return nil, err
	}
	port, err := reservePort()
	if err != nil {
		return nil, err
	}
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		releasePort(port)
		return nil, fmt.Errorf("natstest: %w", err)
	}
	return &Server{Name: name, Port: port, Dir: d, bin: bin, conf: filepath.Join(d, "nats.conf")}, nil
}

// config writes the server's configuration; routes, if any, are the
// cluster's route ports.
func (s *Server) config(routes []int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\n", s.Name, s.Port)
	fmt.Fprintf(&b, "jetstream { store_dir: %q, max_memory_store: 256MB, max_file_store: 2GB }\n", filepath.Join(s.Dir, "js"))
	b.WriteString(`accounts {
  SYS { users = [{user: sys, password: sys}] }
  APP {
    jetstream: enabled
    users = [
      {user: app, password: app}
      {user: ro, password: ro, permissions: {publish: {deny: ["$KV.>"]}}}
      ` + s.revocable() + `
    ]
  }
  NOJS { users = [{user: nojs, password: nojs}] }
}
system_account: SYS
`)
	if len(routes) > 0 {
		fmt.Fprintf(&b, "cluster { name: natstest, listen: 127.0.0.1:%d, routes: [", s.Port+routeOffset)
		for i, r := range routes {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "nats-route://127.0.0.1:%d", r)
		}
		b.WriteString("] }\n")
	}
	if err := os.WriteFile(s.conf, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	return nil
}

// revocable returns the configuration of the user Revocable.
func (s *Server) revocable() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked {
		return `{user: revocable, password: revocable, permissions: {publish: {deny: ["$KV.>"]}}}`
	}
	return `{user: revocable, password: revocable}`
}

// RevokePublish takes the user Revocable's permission to publish to $KV.>
// away: it rewrites the single server's configuration and has the server
// reload it (SIGHUP), which applies to the connections already open.
func (s *Server) RevokePublish() error {
	s.mu.Lock()
	s.revoked = true
	s.mu.Unlock()
	if err := s.config(nil); err != nil {
		return err
	}
	return s.signal(syscall.SIGHUP)
}

// Start starts the process with its configuration and data, and waits
// until it accepts a client's connection. A single server is ready for
// JetStream then; a cluster member once the cluster has a meta leader.
func (s *Server) Start() error {
	s.mu.Lock()
	cmd := exec.Command(s.bin, "-c", s.conf, "-l", filepath.Join(s.Dir, "nats.log"))
	cmd.Dir = s.Dir
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("natstest: start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(ReadyWithin)
	for {
		nc, err := nats.Connect(s.URL(App), nats.Timeout(time.Second), nats.NoReconnect())
		if err == nil {
			nc.Close()
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "nats.log"))
			return fmt.Errorf("natstest: %s exited at start: %s", s.bin, tail(log, 20))
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("natstest: %s did not accept a connection within %v: %w", s.Addr(), ReadyWithin, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL returns the server's URL with user's credentials (the password is
// the user's name).
func (s *Server) URL(user string) string { return "nats://" + user + ":" + user + "@" + s.Addr() }

// Kill kills the process (SIGKILL, after a SIGCONT in case it was paused)
// and waits for it to exit. Killing a server not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-exited
}

// Restart kills the process and starts it again on the same ports with the
// same data.
func (s *Server) Restart() error {
	s.Kill()
	return s.Start()
}

// Close kills the process and gives up its ports. Successive calls do
// nothing.
func (s *Server) Close() {
	s.Kill()
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if !closed {
		releasePort(s.Port)
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
		return errors.New("natstest: not started")
	}
	return s.cmd.Process.Signal(sig)
}

// Start starts a single server in a folder under dir and waits until
// JetStream answers.
func Start(dir string) (*Server, error) {
	s, err := newServer(dir, "n1")
	if err != nil {
		return nil, err
	}
	if err := s.config(nil); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Start(); err != nil {
		s.Close()
		return nil, err
	}
	if err := waitJetStream(s.URL(App)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// StartT is Start in a temporary folder of tb, closed when tb ends.
func StartT(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// waitJetStream waits until the JetStream of url's account answers.
func waitJetStream(url string) error {
	deadline := time.Now().Add(ReadyWithin)
	var last error
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("natstest: JetStream at %s did not answer within %v: %w", url, ReadyWithin, last)
}

// Client connects to url, and closes the connection when tb ends.
func Client(tb testing.TB, url string, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Bucket creates, or finds, the KV bucket name with per-key TTLs
// (LimitMarkerTTL) and replicas copies, on nc's account.
func Bucket(ctx context.Context, nc *nats.Conn, name string, replicas int) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         name,
		Replicas:       replicas,
		LimitMarkerTTL: time.Second,
	})
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
