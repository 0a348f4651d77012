package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/internal/lockset/check"
)

// Redis's sentinel mix runs the server as a group of a primary, two
// replicas and three Sentinels: the command lockset-sentinel of the
// redislease module (by its internal package redistest), built by make
// into the file LOCKSET_SENTINEL names. The clients find the primary
// through the Sentinels LOCKSET_SENTINELS names ("MASTER ADDR,..."), and
// dial each server through their own proxy, by -servers and -endpoint.
const (
	sentinelServerEnv = "LOCKSET_SENTINEL"
	sentinelsEnv      = "LOCKSET_SENTINELS"
)

// The kinds of fault of the sentinel mix: the primary, as the Sentinels
// name it, stopped (a stop past the Sentinels' down-after, 2.5 s, is failed
// over, and the old primary resumes after the failover); the primary
// killed, and started again, empty, once the Sentinels name another (or,
// if they name none within 25 s, started anyway: an erasure of every key,
// recorded as kill-server-wipe); a replica's replication link made silent.
const (
	PausePrimary   = "pause-primary"
	KillPrimary    = "kill-primary"
	CutReplication = "cut-replication"
)

// sentinelGroup is the running lockset-sentinel.
type sentinelGroup struct {
	Master    string   `json:"master"`
	Sentinels []string `json:"sentinels"`
	Servers   []string `json:"servers"`

	mu  sync.Mutex // one fault's line and its answer at a time
	in  io.WriteCloser
	out *bufio.Scanner
}

// startSentinel starts lockset-sentinel and returns the servers'
// addresses, joined by commas.
func (r *runner) startSentinel() (string, error) {
	bin := os.Getenv(sentinelServerEnv)
	if bin == "" {
		return "", fmt.Errorf("%s is not set: build docs/examples/redislease/internal/redistest/cmd/lockset-sentinel and name it there (make lockset ISSUER=redis MIX=sentinel does)", sentinelServerEnv)
	}
	cmd := exec.Command(bin, "-dir", filepath.Join(r.dir, "server"))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	p := &proc{name: "server", cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	g := &sentinelGroup{in: stdin, out: bufio.NewScanner(stdout)}
	if !g.out.Scan() {
		p.signal(syscall.SIGKILL)
		return "", errors.New("lockset-sentinel exited before its group was ready")
	}
	if err := json.Unmarshal(g.out.Bytes(), g); err != nil || len(g.Servers) == 0 {
		p.signal(syscall.SIGKILL)
		return "", fmt.Errorf("lockset-sentinel said %q", g.out.Text())
	}
	// The clients inherit the environment.
	os.Setenv(sentinelsEnv, g.Master+" "+strings.Join(g.Sentinels, ","))
	r.mu.Lock()
	r.server, r.sentinel = p, g
	r.mu.Unlock()
	return strings.Join(g.Servers, ","), nil
}

// do asks lockset-sentinel for one fault.
func (g *sentinelGroup) do(op, addr string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := fmt.Fprintf(g.in, "%s %s\n", op, addr); err != nil {
		return err
	}
	if !g.out.Scan() {
		return errors.New("lockset-sentinel exited")
	}
	if msg, failed := strings.CutPrefix(g.out.Text(), "error: "); failed {
		return errors.New(msg)
	}
	return nil
}

// primary returns the primary's address as the first Sentinel that
// answers names it, asked directly (past the clients' proxies).
func (g *sentinelGroup) primary() (string, error) {
	var last error
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s, DialTimeout: time.Second, ReadTimeout: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a, err := sc.GetMasterAddrByName(ctx, g.Master).Result()
		cancel()
		sc.Close()
		if err == nil {
			return net.JoinHostPort(a[0], a[1]), nil
		}
		last = err
	}
	return "", last
}

// waitFailover waits until the Sentinels name a primary other than from,
// for up to 25 s (redistest.FailoverWithin), and reports whether they did.
func (g *sentinelGroup) waitFailover(from string) bool {
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		if a, err := g.primary(); err == nil && a != from {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// sentinelFault makes a fault of kind to the group, and returns its
// target's address, its heal, and the kind it turned out to be.
func (r *runner) sentinelFault(kind string) (string, func() string, error) {
	g := r.sentinel
	switch kind {
	case PausePrimary, KillPrimary:
		addr, err := g.primary()
		if err != nil {
			return "", nil, err
		}
		if kind == PausePrimary {
			if err := g.do("pause", addr); err != nil {
				return "", nil, err
			}
			return addr, func() string {
				if err := g.do("resume", addr); err != nil {
					fmt.Println("lockset: resume", addr+":", err)
				}
				return kind
			}, nil
		}
		if err := g.do("kill", addr); err != nil {
			return "", nil, err
		}
		return addr, func() string {
			healed := kind
			if !g.waitFailover(addr) {
				fmt.Println("lockset: no failover from", addr, "within 25 s: it starts again empty, erasing every key")
				healed = check.KillServerWipe
			}
			if err := g.do("start", addr); err != nil {
				fmt.Println("lockset: start", addr+":", err)
			}
			return healed
		}, nil
	case CutReplication:
		addr := g.Servers[1+r.rng.IntN(len(g.Servers)-1)]
		if err := g.do("cut", addr); err != nil {
			return "", nil, err
		}
		return addr, func() string {
			if err := g.do("heal", addr); err != nil {
				fmt.Println("lockset: heal", addr+":", err)
			}
			return kind
		}, nil
	}
	panic("lockset: sentinelFault called with kind " + kind)
}

// routeDialer returns a dialer that dials each address of servers through
// the proxy at the same index of proxies, and any other address (a
// Sentinel's) directly.
func routeDialer(servers, proxies []string, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	route := map[string]string{}
	for i, s := range servers {
		if i < len(proxies) {
			route[s] = proxies[i]
		}
	}
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p, ok := route[addr]; ok {
			addr = p
		}
		return d.DialContext(ctx, network, addr)
	}
}
