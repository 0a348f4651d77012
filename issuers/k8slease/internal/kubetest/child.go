package kubetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
)

// The environment of a child process started by StartChild.
const (
	roleEnv   = "KUBETEST_CHILD_ROLE"
	configEnv = "KUBETEST_CHILD_CONFIG" // childConfig as JSON
)

// eventPrefix starts each line a child prints with [Child.Emit]; the parent
// keeps other lines of the child's standard output with its log.
const eventPrefix = "kubetest-event "

// childConfig is what a child needs to reach the apiserver, and its role's
// arguments.
type childConfig struct {
	Host  string   `json:"host"`
	CA    []byte   `json:"ca"`
	Token string   `json:"token"`
	Args  []string `json:"args"`
}

// A Role is the body of a child process: it runs with the child's
// [Child], and its error, if any, ends the child with status 1.
type Role func(c *Child) error

// ChildMain runs the role of a child process started by [StartChild] and
// exits; in any other process it returns at once. Call it first in
// TestMain, before anything is started, with every role the package's tests
// start:
//
//	func TestMain(m *testing.M) {
//		kubetest.ChildMain(map[string]kubetest.Role{"holder": holder})
//		// then start the shared Server, m.Run, goleak.Find with
//		// IgnoreGoroutines, stop the Server, goleak.Find
//	}
func ChildMain(roles map[string]Role) {
	name, ok := os.LookupEnv(roleEnv)
	if !ok {
		return
	}
	role := roles[name]
	if role == nil {
		fmt.Fprintf(os.Stderr, "kubetest: the child's role %q is not among the roles given to ChildMain\n", name)
		os.Exit(2)
	}
	var cc childConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cc); err != nil {
		fmt.Fprintf(os.Stderr, "kubetest: the child's configuration: %v\n", err)
		os.Exit(2)
	}
	c := &Child{
		Config: &rest.Config{
			Host:            cc.Host,
			BearerToken:     cc.Token,
			TLSClientConfig: rest.TLSClientConfig{CAData: cc.CA},
			QPS:             1000,
			Burst:           2000,
		},
		Args: cc.Args,
		in:   bufio.NewReader(os.Stdin),
	}
	if err := role(c); err != nil {
		fmt.Fprintf(os.Stderr, "kubetest: role %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Child is what a [Role] is given in a child process.
type Child struct {
	// Config reaches the apiserver as the configuration given to
	// StartChild did: same host, CA and token, with high QPS and Burst.
	Config *rest.Config
	// Args are the arguments given to StartChild.
	Args []string

	in *bufio.Reader
	mu sync.Mutex
}

// Clientset returns a new clientset of c.Config.
func (c *Child) Clientset() (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(c.Config)
}

// Emit prints an event for the parent, stamped with the time now: the
// parent's [Process.Next] returns it. Text is one line. Emit is safe for
// concurrent use.
func (c *Child) Emit(text string) {
	if strings.ContainsAny(text, "\r\n") {
		panic("kubetest: Emit called with a text of more than one line")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(os.Stdout, "%s%d %s\n", eventPrefix, time.Now().UnixNano(), text)
}

// ReadLine returns the next line the parent sent with [Process.Send],
// without its newline, waiting for it; io.EOF once the parent is gone.
func (c *Child) ReadLine() (string, error) {
	line, err := c.in.ReadString('\n')
	if err != nil {
		if line != "" && errors.Is(err, io.EOF) {
			return line, nil
		}
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// An Event is a line a child emitted with [Child.Emit].
type Event struct {
	// Time is when the child emitted it, on the wall clock that this
	// process's time.Now reads too: compare it with times taken here
	// through Time.Round(0) or UnixNano, never the monotonic reading,
	// which an event has not.
	Time time.Time
	Text string
}

// Process is a child process started by [StartChild]. Its methods are
// safe for concurrent use.
type Process struct {
	cmd    *exec.Cmd
	log    string // the file of the child's output but its events
	stdin  io.WriteCloser
	exited chan struct{} // closed once the child has exited and its output is read
	err    error         // the child's exit, read after exited is closed

	mu     sync.Mutex
	events []Event       // emitted, not yet returned by Next
	more   chan struct{} // a token when events grew
}

// StartChild starts the test binary again, as a child process that runs
// role with a client configuration equal to cfg's host, CA and bearer
// token, and args; the test binary's TestMain must call [ChildMain]. The
// child is killed, and waited for, when the test ends, and its output is
// logged if the test failed. A child dies with SIGKILL if this process
// dies first.
func StartChild(t testing.TB, cfg *rest.Config, role string, args ...string) *Process {
	t.Helper()
	cc, err := json.Marshal(childConfig{Host: cfg.Host, CA: cfg.CAData, Token: cfg.BearerToken, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	logName := filepath.Join(t.TempDir(), "child.log")
	// Appending, so that the child's standard error and the lines the
	// reader copies, written through two descriptors, never overwrite
	// each other.
	logFile, err := os.OpenFile(logName, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	// -test.run=^$: a TestMain without ChildMain runs no test in the
	// child, which then exits at once.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, configEnv+"="+string(cc))
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubetest: start child %s: %v", role, err)
	}
	p := &Process{cmd: cmd, log: logName, stdin: stdin, exited: make(chan struct{}), more: make(chan struct{}, 1)}
	// The child's standard output, but for its events, goes to the log
	// file too.
	out, err := os.OpenFile(logName, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	go p.read(stdout, out)
	t.Cleanup(func() {
		p.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("child %s (pid %d) output:\n%s", role, cmd.Process.Pid, p.Output())
		}
	})
	return p
}

// read turns the child's standard output into events until it ends, then
// waits for the child.
func (p *Process) read(stdout io.Reader, log *os.File) {
	defer close(p.exited)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		ev, ok := parseEvent(line)
		if !ok {
			fmt.Fprintln(log, line)
			continue
		}
		p.mu.Lock()
		p.events = append(p.events, ev)
		p.mu.Unlock()
		select {
		case p.more <- struct{}{}:
		default:
		}
	}
	// A child killed mid-line leaves the rest unread: drain it so that
	// Wait may return.
	io.Copy(log, stdout)
	log.Close()
	p.err = p.cmd.Wait()
}

func parseEvent(line string) (Event, bool) {
	rest, ok := strings.CutPrefix(line, eventPrefix)
	if !ok {
		return Event{}, false
	}
	ns, text, _ := strings.Cut(rest, " ")
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return Event{}, false
	}
	return Event{Time: time.Unix(0, n), Text: text}, true
}

// Output returns what the child wrote so far to its standard error, and
// to its standard output but its events.
func (p *Process) Output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// Pid returns the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Next returns the child's next event, waiting for it until ctx is done.
// Once the child has exited and every event was read, Next returns an
// error that says how it exited.
func (p *Process) Next(ctx context.Context) (Event, error) {
	for {
		p.mu.Lock()
		if len(p.events) > 0 {
			ev := p.events[0]
			p.events = p.events[1:]
			p.mu.Unlock()
			return ev, nil
		}
		p.mu.Unlock()
		select {
		case <-p.more:
		case <-p.exited:
			p.mu.Lock()
			n := len(p.events)
			p.mu.Unlock()
			if n == 0 {
				return Event{}, fmt.Errorf("kubetest: child %d exited (%v) with no more events", p.Pid(), p.err)
			}
		case <-ctx.Done():
			return Event{}, fmt.Errorf("kubetest: no event from child %d: %w", p.Pid(), context.Cause(ctx))
		}
	}
}

// Send writes line and a newline to the child's standard input, where
// [Child.ReadLine] reads it. A stopped child reads it once continued.
func (p *Process) Send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// Stop stops the child with SIGSTOP: it runs no more, and its connections
// stay open and silent, until [Process.Continue].
func (p *Process) Stop() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// Continue continues a stopped child with SIGCONT.
func (p *Process) Continue() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// Kill kills the child with SIGKILL, stopped or not, and returns once it
// has exited. Successive calls do nothing more.
func (p *Process) Kill() error {
	err := p.cmd.Process.Kill()
	<-p.exited
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// Wait closes the child's standard input, waits for the child to exit by
// itself and returns its exit error, as [exec.Cmd.Wait] does. Events not
// yet read stay for [Process.Next].
func (p *Process) Wait() error {
	p.stdin.Close()
	<-p.exited
	return p.err
}
