package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/lockset/check"
	"github.com/zukhruf/lease/internal/lockset/fakeclock"
	"github.com/zukhruf/lease/internal/lockset/history"
	"github.com/zukhruf/lease/internal/lockset/layout"
)

// sides are the two sets of clients of a run: the issuer's leases, and
// the peer library beside them, on locks of their own.
var sides = []string{"lease", "peer"}

// issuers are the issuers a run can take.
var issuers = []string{"etcd", "redis", "pg", "mysql", "k8s", "nats", "s3"}

func newLocker(c clientConfig) (locker, error) {
	switch c.issuer {
	case "etcd":
		return newEtcdLocker(c)
	case "redis":
		return newRedisLocker(c)
	case "pg":
		return newPGLocker(c)
	case "mysql":
		return newMySQLLocker(c)
	case "k8s":
		return newKubeLocker(c)
	case "nats":
		return newNATSLocker(c)
	case "s3":
		return newS3Locker(c)
	}
	return nil, fmt.Errorf("no issuer %q (%s)", c.issuer, strings.Join(issuers, ", "))
}

// serverMain is "lockset server": the server process of an issuer whose
// server runs in Go (etcd); the others' are the servers' own binaries.
func serverMain(args []string) error { return etcdServerMain(args) }

// proc is a process the run started: a client, or the server.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	// group: the process leads a process group, which signals reach
	// whole. children: signals reach its children too, which lead groups
	// of their own (PostgreSQL's backends call setsid).
	group, children bool
}

// signal sends sig to the process (and its group or children), unless it
// has exited: its pid may be another process's by now.
func (p *proc) signal(sig syscall.Signal) {
	if p == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	pid := p.cmd.Process.Pid
	switch {
	case p.group:
		syscall.Kill(-pid, sig)
	case p.children && sig == syscall.SIGCONT:
		for _, c := range childrenOf(pid) {
			syscall.Kill(c, sig)
		}
		syscall.Kill(pid, sig)
	case p.children:
		// Stopped first, the parent starts no other child meanwhile;
		// its children are found before a kill gives them to init.
		syscall.Kill(pid, syscall.SIGSTOP)
		for _, c := range childrenOf(pid) {
			syscall.Kill(c, sig)
		}
		syscall.Kill(pid, sig)
	default:
		p.cmd.Process.Signal(sig)
	}
}

// childrenOf returns the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, child)
		}
	}
	return kids
}

// runner is one run of the workload.
type runner struct {
	issuer     string
	dir        string
	ttl        time.Duration
	rng        *rand.Rand
	out        *history.Writer
	self       string // this executable
	serverPort int    // the server's client port, set at the first start, before any fault, and kept across restarts
	serverDir  string // the server's files that are not in dir: PostgreSQL's data, MariaDB's socket

	cluster      bool             // etcd's server is a cluster of three (the failover mix)
	redisMix     string           // sentinel or cluster: Redis's server is a group behind Sentinels, or a Cluster
	standby      bool             // PostgreSQL's server is a primary and a standby (the standby mix)
	serverFaults sync.Mutex       // held while a fault is made to the server's process
	clock        *fakeclock.Clock // the server's wall clock, in a run with clock-rate faults

	mu         sync.Mutex
	server     *proc
	members    []*member   // an etcd cluster's, in the failover mix; server is nil then
	redisGroup *redisGroup // Redis's servers, in the sentinel and cluster mixes; server is their lockset-redis
	pg         *pgPair     // PostgreSQL's primary and standby, in the standby mix; server is the primary
	clients    []*contender
	holders    map[string]string // lock → the process that holds it, as its events say
	faults     []check.Fault
	// mateRecords counts the records in faults of an ended session's
	// other locks: one fault, recorded on each lock it erased.
	mateRecords int
}

// contender is a client process with its fault proxies, one for each of
// the server's endpoints.
type contender struct {
	proc    *proc
	side    string
	locks   []string // the locks it contends for, through one client
	proxies []*faultnet.Proxy
	// How many faults are active on the link and on the process; under
	// runner.mu.
	faulted, paused int
}

// runConfig is one run's settings.
type runConfig struct {
	issuer, mix    string
	seconds        int
	seed           int64
	dir            string
	perLock, locks int
	perProcess     int // locks a contender process of the leases contends for at once
	ttl            time.Duration
	register       string // the real store the holders also write through its fence, or ""
}

func (c *runConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.issuer, "issuer", "etcd", "the issuer: "+strings.Join(issuers, ", "))
	fs.IntVar(&c.seconds, "seconds", 60, "how long the workload runs")
	fs.Int64Var(&c.seed, "seed", 1, "the seed of the fault schedule and of the clients")
	fs.StringVar(&c.dir, "out", "", "the run's folder (default: a new one under the temporary folder)")
	fs.IntVar(&c.perLock, "clients", 5, "contenders per lock")
	fs.IntVar(&c.locks, "locks", 3, "locks per side")
	fs.IntVar(&c.perProcess, "perprocess", 1, "locks each contender process of the leases contends for at once, through one client (its leases share its sessions); -locks must be a multiple")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "the leases' TTL")
	fs.StringVar(&c.mix, "mix", "all", "the fault mix: "+strings.Join(mixes, ", ")+", or Redis's clock")
	fs.StringVar(&c.register, "register", "", "a real store the holders also write the register to, through its fence of package fencing: "+strings.Join(stores, ", ")+" (default: the harness's register alone)")
}

func runMain(args []string) error {
	var c runConfig
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	c.flags(fs)
	fs.Parse(args)
	res, _, err := run(c)
	if err != nil {
		return err
	}
	return report(res, "lease")
}

// run makes one run and checks it; it writes the run's folder and returns
// the check's result and the summary.
func run(c runConfig) (check.Result, summary, error) {
	var res check.Result
	var sum summary
	kinds, err := faultKinds(c.issuer, c.mix)
	if err != nil {
		return res, sum, err
	}
	dir := c.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", fmt.Sprintf("lockset-%s-%s-seed%d-", c.issuer, c.mix, c.seed)); err != nil {
			return res, sum, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, sum, err
	}
	fmt.Printf("lockset: run of %s, faults %s, seed %d, %d s: %s\n", c.issuer, c.mix, c.seed, c.seconds, dir)
	self, err := os.Executable()
	if err != nil {
		return res, sum, err
	}
	hf, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return res, sum, err
	}
	defer hf.Close()
	r := &runner{issuer: c.issuer, dir: dir, ttl: c.ttl, rng: rand.New(rand.NewPCG(uint64(c.seed), 0x10c5e7)),
		out: history.NewWriter(hf), self: self, holders: map[string]string{},
		cluster: c.issuer == "etcd" && c.mix == "failover",
		standby: c.issuer == "pg" && c.mix == "standby"}
	if c.issuer == "redis" && (c.mix == "sentinel" || c.mix == "cluster") {
		r.redisMix = c.mix
	}

	if slices.Contains(kinds, check.ClockRate) {
		clockDir := filepath.Join(dir, "clock")
		if err := os.MkdirAll(clockDir, 0o755); err != nil {
			return res, sum, err
		}
		defer os.RemoveAll(clockDir)
		if r.clock, err = fakeclock.New(clockDir); err != nil {
			return res, sum, err
		}
	}
	endpoint, err := r.startServer()
	if err != nil {
		return res, sum, err
	}
	defer func() {
		for _, s := range r.servers() {
			s.signal(syscall.SIGKILL)
			if r.serverDir != "" {
				<-s.done
			}
		}
		if r.serverDir != "" {
			os.RemoveAll(r.serverDir)
		}
		for _, m := range r.members {
			m.peerProxy.Close()
		}
	}()

	reg := newRegister(r.out)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, sum, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", reg)
	registerURL := "http://" + ln.Addr().String()
	var store string // the clients' -store
	if c.register != "" {
		s, err := r.startStore(c.register, mux, registerURL)
		if err != nil {
			return res, sum, err
		}
		defer s.stop()
		store = s.kind + "=" + s.addr
		fmt.Printf("lockset: the register also in %s at %s, through its fence\n", s.kind, s.addr)
	}
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	defer hs.Close()

	for _, side := range sides {
		locks, perProcess := c.locks, c.perProcess
		if side == "peer" && perProcess > 1 {
			// The peer stays one lock a process, on as many processes
			// as the leases: its locks by hand on the databases hold a
			// session each, which would be hundreds a process, and its
			// figures stay those of the runs of one lock a process.
			locks, perProcess = locks/perProcess, 1
		}
		procs, err := layout.Processes(side, locks, perProcess, c.perLock)
		if err != nil {
			return res, sum, err
		}
		for _, locks := range procs {
			if err := r.startClient(side, locks, endpoint, registerURL, store, uint64(c.seed)); err != nil {
				r.stopClients()
				return res, sum, err
			}
		}
	}

	start := history.Now()
	r.schedule(time.Duration(c.seconds)*time.Second, kinds)
	// Every fault is healed: a server that is not running crashed, and
	// what the clients did after it tests no lease.
	var crashed error
	for _, s := range r.servers() {
		select {
		case <-s.done:
			crashed = errors.Join(crashed, fmt.Errorf("the server process %s exited during the run, not by a fault", s.name))
		default:
		}
	}
	r.stopClients()
	if crashed != nil {
		return res, sum, crashed
	}
	for _, s := range r.servers() {
		s.signal(syscall.SIGKILL)
		<-s.done
	}
	// The server's data is not an output of the run, and etcd's write-ahead
	// log alone takes 64 MB.
	os.RemoveAll(filepath.Join(dir, "server"))
	if r.serverDir != "" {
		os.RemoveAll(r.serverDir)
	}
	r.out.Flush()
	hf.Sync()
	window := 4 * r.ttl

	res, err = checkFile(filepath.Join(dir, "history.jsonl"), r.faults, checkOptions(c.issuer, window, r.ttl))
	if err != nil {
		return res, sum, err
	}
	sum = summary{Issuer: c.issuer, Mix: c.mix, Seed: c.seed, Seconds: c.seconds, Register: c.register, Faults: r.faults,
		Lease: res.Sides["lease"], Peer: res.Sides["peer"], LossWindowNS: int64(window), TTLNS: int64(r.ttl)}
	if sum.Faults == nil {
		sum.Faults = []check.Fault{}
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return res, sum, err
	}
	if r.mateRecords > 0 {
		fmt.Printf("lockset: %s seed %d: %d faults, and %d records of them on the other locks of the sessions they ended, in %v\n", c.issuer, c.seed, len(r.faults)-r.mateRecords, r.mateRecords, time.Duration(history.Now()-start).Round(time.Second))
	} else {
		fmt.Printf("lockset: %s seed %d: %d faults in %v\n", c.issuer, c.seed, len(r.faults), time.Duration(history.Now()-start).Round(time.Second))
	}
	return res, sum, nil
}

// startRedis starts redis-server on its data folder, on the port of the
// last start if there was one.
func (r *runner) startRedis() (string, error) {
	return r.serve(func(port int) (*exec.Cmd, error) {
		cmd, err := redisCommand(filepath.Join(r.dir, "server"), port)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if r.clock != nil {
			cmd.Env = append(os.Environ(), r.clock.Env()...)
			r.clock.Starting()
		}
		return cmd, nil
	}, false, func(addr string, exited <-chan struct{}) error { return redisReady(addr, exited) })
}

// serve starts the server process that command makes for a port (the
// port of the last start, or a free one at the first) and returns its
// address once ready says it serves there. It tries a few times: another
// process may take a free port, and a killed server's port, or its
// shared memory, may not be free yet. children: signals reach the
// process's children too (see proc).
func (r *runner) serve(command func(port int) (*exec.Cmd, error), children bool, ready func(addr string, exited <-chan struct{}) error) (string, error) {
	for try := 0; ; try++ {
		port := r.serverPort
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return "", err
			}
		}
		cmd, err := command(port)
		if err != nil {
			return "", err
		}
		err = cmd.Start()
		// A log file the command writes to is the child's once started.
		for _, w := range []io.Writer{cmd.Stdout, cmd.Stderr} {
			if f, ok := w.(*os.File); ok && f != os.Stdout && f != os.Stderr {
				f.Close()
			}
		}
		if err != nil {
			return "", err
		}
		p := &proc{name: "server", cmd: cmd, done: make(chan struct{}), children: children}
		go func() { cmd.Wait(); close(p.done) }()
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if err := ready(addr, p.done); err != nil {
			p.signal(syscall.SIGKILL)
			<-p.done
			if try < 4 {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			return "", err
		}
		if r.serverPort == 0 {
			r.serverPort = port
		}
		r.mu.Lock()
		r.server = p
		r.mu.Unlock()
		return addr, nil
	}
}

// waitServing calls probe, each try bounded by a second, until it
// succeeds, the server named name exits, or within has passed.
func waitServing(name string, within time.Duration, exited <-chan struct{}, probe func(context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := probe(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New(name + " exited")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", name, within, err)
		}
	}
}

// startServer starts the server process (again, after a kill, on the same
// port and data) and returns its endpoint.
func (r *runner) startServer() (string, error) {
	switch r.issuer {
	case "redis":
		if r.redisMix != "" {
			return r.startRedisGroup(r.redisMix == "cluster")
		}
		return r.startRedis()
	case "pg":
		if r.standby {
			return r.startPGPair()
		}
		return r.startPG()
	case "mysql":
		return r.startMySQL()
	case "k8s":
		return r.startKube()
	case "nats":
		return r.startNATS()
	case "s3":
		return r.startS3()
	}
	if r.cluster {
		return r.startEtcdCluster()
	}
	p, stdout, err := startPiped("server", exec.Command(r.self, "server", "-issuer", r.issuer, "-dir", filepath.Join(r.dir, "server"), "-port", strconv.Itoa(r.serverPort)))
	if err != nil {
		return "", err
	}
	cmd := p.cmd
	go func() { cmd.Wait(); close(p.done) }()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		cmd.Process.Kill()
		return "", errors.New("the server exited before it served")
	}
	endpoint, ok := strings.CutPrefix(sc.Text(), "endpoint ")
	if !ok {
		cmd.Process.Kill()
		return "", fmt.Errorf("the server said %q", sc.Text())
	}
	go io.Copy(io.Discard, stdout)
	_, port, _ := net.SplitHostPort(endpoint)
	if r.serverPort == 0 {
		r.serverPort, _ = strconv.Atoi(port)
	}
	r.mu.Lock()
	r.server = p
	r.mu.Unlock()
	return endpoint, nil
}

// startPiped starts cmd as the process name, its standard error this
// process's and its standard output a pipe the caller reads, killed if
// this process dies. The caller waits for it, once done reading, and
// closes its done.
func startPiped(name string, cmd *exec.Cmd) (*proc, io.ReadCloser, error) {
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return &proc{name: name, cmd: cmd, done: make(chan struct{})}, stdout, nil
}

func (r *runner) startClient(side string, locks []string, endpoint, register, store string, seed uint64) error {
	var proxies []*faultnet.Proxy
	var addrs []string
	for _, e := range strings.Split(endpoint, ",") {
		proxy, err := faultnet.Listen(e)
		if err != nil {
			return err
		}
		proxies = append(proxies, proxy)
		addrs = append(addrs, proxy.Addr())
	}
	name := fmt.Sprintf("%s-%d", side, len(r.clients)+1)
	cmd := exec.Command(r.self, "client", "-issuer", r.issuer, "-side", side, "-p", name, "-lock", strings.Join(locks, ","),
		"-endpoint", strings.Join(addrs, ","), "-servers", endpoint, "-register", register, "-store", store, "-ttl", r.ttl.String(), "-seed", strconv.FormatUint(seed*1000+uint64(len(r.clients)), 10))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e history.Event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			r.out.Write(e)
			r.track(e)
		}
		cmd.Wait()
		close(p.done)
	}()
	r.clients = append(r.clients, &contender{proc: p, side: side, locks: locks, proxies: proxies})
	return nil
}

// track keeps who holds each lock, as the events say, for the faults that
// aim at a holder.
func (r *runner) track(e history.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case e.F == history.Acquire && e.Type == history.OK:
		r.holders[e.Lock] = e.P
	case (e.F == history.Lost || e.F == history.Release && e.Type == history.Invoke) && r.holders[e.Lock] == e.P:
		delete(r.holders, e.Lock)
	}
}

// stopClients heals every link, resumes every process, and stops the
// clients: SIGTERM (they release what they hold), then SIGKILL after a
// while.
func (r *runner) stopClients() {
	for _, c := range r.clients {
		c.eachProxy((*faultnet.Proxy).Heal)
		c.proc.signal(syscall.SIGCONT)
		c.proc.signal(syscall.SIGTERM)
	}
	for _, m := range r.members {
		m.peerProxy.Heal()
	}
	for _, s := range r.servers() {
		s.signal(syscall.SIGCONT)
	}
	deadline := time.Now().Add(4 * r.ttl)
	for _, c := range r.clients {
		select {
		case <-c.proc.done:
		case <-time.After(time.Until(deadline)):
			c.proc.signal(syscall.SIGKILL)
			<-c.proc.done
		}
		c.eachProxy(func(p *faultnet.Proxy) { p.Close() })
	}
}

// eachProxy calls f with each of the client's proxies.
func (c *contender) eachProxy(f func(*faultnet.Proxy)) {
	for _, p := range c.proxies {
		f(p)
	}
}
