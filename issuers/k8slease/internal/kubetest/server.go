package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest/kubebin"
)

// readyTimeout bounds the wait for a started apiserver or etcd to serve; it
// guards against a hang, it is not a measure: on 2 shared cores the
// apiserver is ready within a few seconds.
const readyTimeout = 2 * time.Minute

// startAttempts bounds the starts of an apiserver or an etcd whose free port
// was taken by another listener between the pick and the start.
const startAttempts = 3

// Options configures a [Server]. The zero Options is the apiserver's
// defaults.
type Options struct {
	// MinRequestTimeout is kube-apiserver's --min-request-timeout, in whole
	// seconds (rounded up): the apiserver ends a watch that names no
	// timeoutSeconds of its own after a random time between it and twice
	// it. Zero keeps the apiserver's default of 1800 s. client-go's
	// reflectors and informers name their own timeout, so this ends only
	// plain watches, such as a Watch call without TimeoutSeconds.
	MinRequestTimeout time.Duration
}

// Server is a kube-apiserver process started by this process, on 127.0.0.1
// and a free port, with its storage in an etcd server running inside this
// process. Its methods are safe for concurrent use.
type Server struct {
	opts  Options
	dir   string // etcd's data, the apiserver's certificates, keys, tokens and log
	bin   string
	port  int // the apiserver's secure port
	token string
	logf  func(format string, args ...any)

	etcd etcdServer

	// ca is the apiserver's certificate bundle, the clients' CA: set by
	// the first start, before Start returns, and never written again.
	ca []byte

	mu     sync.Mutex
	cmd    *exec.Cmd // nil while the apiserver is stopped
	exited chan struct{}
	closed bool
}

// Start starts a Server with the zero [Options]; see [Options.Start].
func Start(t testing.TB) *Server {
	t.Helper()
	return Options{}.Start(t)
}

// Start starts etcd and kube-apiserver and returns once the apiserver
// answers ok on /readyz, failing t if they do not start. The server is
// stopped and its folder removed when the test ends; if the test failed,
// the end of the apiserver's log is logged first.
//
// If the kube-apiserver binary is missing, Start builds it first (see
// package kubebin), which takes tens of minutes with a cold Go build cache
// (see README.md): longer than go test's default -timeout. make
// k8s-apiserver builds it ahead.
func (o Options) Start(t testing.TB) *Server {
	t.Helper()
	s, err := o.start(t.Logf, func(format string, args ...any) {
		t.Logf(format, args...)
		if !testing.Verbose() {
			// Without -v a test's log waits for its end: say at once why
			// nothing happens for minutes.
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-apiserver's log, last lines:\n%s", s.LogTail(40))
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// StartShared starts a Server as [Options.Start] does, for a TestMain whose
// tests share it. The caller calls stop, which stops the server and removes
// its folder, once the tests are done. An error carries the end of the
// apiserver's log.
func (o Options) StartShared() (s *Server, stop func() error, err error) {
	s, err = o.start(func(string, ...any) {}, func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// StartShared starts a Server with the zero [Options]; see
// [Options.StartShared].
func StartShared() (*Server, func() error, error) { return Options{}.StartShared() }

// start starts a Server; logf receives the times to ready, buildf what
// kubebin says of a build.
func (o Options) start(logf, buildf func(string, ...any)) (*Server, error) {
	bin, err := kubebin.Ensure(buildf)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s := &Server{opts: o, dir: dir, bin: bin, logf: logf}
	s.etcd.dir = filepath.Join(dir, "etcd")
	if err := s.prepare(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.etcd.startFresh(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for try := 1; ; try++ {
		if s.port, err = freePort(); err == nil {
			err = s.StartAPIServer()
		}
		if err == nil {
			return s, nil
		}
		if try == startAttempts || !strings.Contains(err.Error(), "address already in use") {
			s.Close()
			return nil, err
		}
	}
}

// prepare writes the service account key and the token file, and makes the
// certificate folder.
func (s *Server) prepare() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(s.path("sa.key"), keyPEM, 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	b := make([]byte, 16)
	rand.Read(b)
	s.token = hex.EncodeToString(b)
	// token,user,uid,"groups": a member of system:masters passes every
	// RBAC check.
	tokens := s.token + `,kubetest-admin,kubetest-admin,"system:masters"` + "\n"
	if err := os.WriteFile(s.path("tokens.csv"), []byte(tokens), 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	if err := os.Mkdir(s.path("certs"), 0o700); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	return nil
}

func (s *Server) path(name string) string { return filepath.Join(s.dir, name) }

// args returns kube-apiserver's command line.
func (s *Server) args() []string {
	args := []string{
		"--etcd-servers=http://" + s.etcd.clientAddr,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.port),
		"--advertise-address=127.0.0.1",
		// No Endpoints object for the apiserver's own Service: nothing
		// in the tests reaches the apiserver through it.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.0.0.0/24",
		// The apiserver makes a self-signed certificate for 127.0.0.1 in
		// it at the first start and keeps it across restarts.
		"--cert-dir=" + s.path("certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + s.path("sa.key"),
		"--service-account-signing-key-file=" + s.path("sa.key"),
		"--token-auth-file=" + s.path("tokens.csv"),
		"--authorization-mode=RBAC",
	}
	if d := s.opts.MinRequestTimeout; d > 0 {
		args = append(args, "--min-request-timeout="+strconv.Itoa(int(math.Ceil(d.Seconds()))))
	}
	return args
}

// StartAPIServer starts kube-apiserver after [Server.StopAPIServer], on the
// same port, certificate and etcd, and returns once it answers ok on
// /readyz. Start calls it the first time.
func (s *Server) StartAPIServer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kubetest: the server is closed")
	}
	if s.cmd != nil {
		return errors.New("kubetest: kube-apiserver is running")
	}
	logFile, err := os.OpenFile(s.path("kube-apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "--- kubetest: %s %s\n", s.bin, strings.Join(s.args(), " "))
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// No apiserver outlives this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubetest: start kube-apiserver: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(exited); err != nil {
		cmd.Process.Kill()
		<-exited
		s.cmd = nil
		return fmt.Errorf("%w; kube-apiserver's log, last lines:\n%s", err, s.LogTail(20))
	}
	s.logf("kubetest: kube-apiserver ready on %s in %v", s.Addr(), time.Since(start).Round(time.Millisecond))
	return nil
}

// waitReady polls /readyz until it answers ok. It reads the apiserver's
// certificate afresh before each try until then, since the apiserver may
// be writing it, and checks that a restart kept it. s.mu is held.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for {
		select {
		case <-exited:
			return fmt.Errorf("kubetest: kube-apiserver exited before it was ready (%v)", last)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: kube-apiserver not ready after %v: %v", readyTimeout, last)
		}
		var ca []byte
		if ca, last = s.readCA(); last == nil {
			if last = s.readyz(ca); last == nil {
				if s.ca == nil {
					s.ca = ca
				} else if !bytes.Equal(s.ca, ca) {
					return errors.New("kubetest: kube-apiserver made a new certificate at a restart")
				}
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readCA returns the apiserver's certificate bundle if it parses.
func (s *Server) readCA() ([]byte, error) {
	ca, err := os.ReadFile(filepath.Join(s.path("certs"), "apiserver.crt"))
	if err != nil {
		return nil, err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return nil, errors.New("apiserver.crt has no certificate yet")
	}
	return ca, nil
}

// readyz asks /readyz once, verifying the certificate against ca.
func (s *Server) readyz(ca []byte) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.Addr()+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// StopAPIServer kills kube-apiserver with SIGKILL, as a crash does: its
// connections are reset. It returns once the process has exited. A stopped
// apiserver stays stopped.
func (s *Server) StopAPIServer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopAPIServer()
}

func (s *Server) stopAPIServer() error {
	if s.cmd == nil {
		return nil
	}
	err := s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kubetest: kill kube-apiserver: %w", err)
	}
	return nil
}

// RestartAPIServer kills kube-apiserver ([Server.StopAPIServer]) and starts
// it again ([Server.StartAPIServer]).
func (s *Server) RestartAPIServer() error {
	if err := s.StopAPIServer(); err != nil {
		return err
	}
	return s.StartAPIServer()
}

// StopEtcd stops the etcd server under the apiserver: it stops accepting
// connections at once, then waits for the open streams, such as the
// apiserver's watches, up to etcd's request timeout (7 s) before cutting
// them. The apiserver goes on running, and a request that needs etcd waits
// until its own deadline or the apiserver's --request-timeout (a minute by
// default).
func (s *Server) StopEtcd() error {
	start := time.Now()
	s.etcd.stop()
	s.logf("kubetest: etcd stopped in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// StartEtcd starts the etcd server again after [Server.StopEtcd], on the
// same ports and data, and returns once it serves. The apiserver
// reconnects by itself, after its etcd client's backoff: a few seconds
// pass before its requests succeed again.
func (s *Server) StartEtcd() error {
	return s.etcd.start()
}

// Close stops kube-apiserver and etcd and removes the server's folder.
// Successive calls do nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.stopAPIServer()
	s.mu.Unlock()
	s.etcd.stop()
	if rerr := os.RemoveAll(s.dir); err == nil && rerr != nil {
		err = fmt.Errorf("kubetest: %w", rerr)
	}
	return err
}

// LogTail returns the last n lines of kube-apiserver's output, across its
// restarts.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(s.path("kube-apiserver.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Addr returns the apiserver's address, "127.0.0.1:port"; it is the same
// across restarts.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// EtcdAddr returns the address of the etcd server under the apiserver,
// "127.0.0.1:port"; it is the same across restarts.
func (s *Server) EtcdAddr() string { return s.etcd.clientAddr }

// Config returns a new client configuration for the apiserver: its address,
// its certificate as the only CA, and the bearer token of a member of
// system:masters. Its QPS and Burst are high enough that client-go's rate
// limiter never delays a test.
func (s *Server) Config() *rest.Config { return s.ConfigVia(s.Addr()) }

// ConfigVia returns the configuration of [Server.Config] with addr, such as
// a proxy's "127.0.0.1:port", as the address clients dial. The
// certificate is still verified: it names 127.0.0.1 and localhost.
func (s *Server) ConfigVia(addr string) *rest.Config {
	return &rest.Config{
		Host:            "https://" + addr,
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: bytes.Clone(s.ca)},
		QPS:             1000,
		Burst:           2000,
	}
}

// Clientset returns a new clientset of [Server.Config].
func (s *Server) Clientset() *kubernetes.Clientset {
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		// Only a configuration that does not parse fails, and Config's
		// does.
		panic("kubetest: " + err.Error())
	}
	return cs
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubetest: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
