package etcdlease_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/issuers/etcdlease"
	"github.com/zukhruf/lease/issuers/etcdlease/internal/etcdtest"
)

// The flags of TestHoldMany. Without them it is the smoke test of make
// e2e-etcd: 1,000 leases on one session held for 3 s, the issuer alone.
var (
	manyLeases  = flag.String("many.leases", "1000", "TestHoldMany: the numbers of leases to hold, comma-separated")
	manyHold    = flag.Duration("many.hold", 3*time.Second, "TestHoldMany: how long to hold them")
	manyPeer    = flag.Bool("many.peer", false, "TestHoldMany: hold as many concurrency.Mutex locks on one session beside, in the same run")
	manyReadme  = flag.String("many.readme", "", "TestHoldMany: write the table into this README's section on many leases")
	manyNote    = flag.String("many.note", "", "TestHoldMany: a sentence the README adds after the machine's load, such as what else ran on it")
	manyCommand = flag.String("many.command", "go test -run '^TestHoldMany$'", "TestHoldMany: the command the README names")
)

// manyServerEnv names the environment variable that makes the test binary
// an etcd server for TestHoldMany, in a process of its own so that the
// goroutines and heap the test counts are its clients' alone; its value is
// the server's data folder.
const manyServerEnv = "ETCDLEASE_MANY_SERVER"

// manyServer runs an etcd server in dir, prints its endpoint, and stops it
// when its standard input closes.
func manyServer(dir string) int {
	srv, err := etcdtest.Start(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(srv.Endpoint())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

// startManyServer starts an etcd server in a child process and returns its
// endpoint.
func startManyServer(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), manyServerEnv+"="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the etcd server's process printed no endpoint: %v", err)
	}
	go io.Copy(io.Discard, stdout)
	return strings.TrimSpace(line)
}

// serverMetrics reads the Prometheus metrics of the etcd server at
// endpoint: each sample's name and labels, and its value.
func serverMetrics(t *testing.T, endpoint string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// sum adds the samples of name whose labels hold every one of labels.
func sum(m map[string]float64, name string, labels ...string) float64 {
	var n float64
next:
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue next
			}
		}
		n += v
	}
	return n
}

// openStreams returns how many streams of method are open on the server.
func openStreams(m map[string]float64, method string) int {
	l := `grpc_method="` + method + `"`
	return int(sum(m, "grpc_server_started_total", l) - sum(m, "grpc_server_handled_total", l))
}

// manyRow is one line of TestHoldMany's table.
type manyRow struct {
	client     string
	leases     int
	grant      time.Duration
	keepAlives int // keepalive streams open on the server while holding
	watchSt    int // watch streams
	watchers   int
	reqPerSec  float64 // messages the server received a second while holding
	goroutines int     // this process's, more than before the leases
	heap       float64 // bytes of this process's heap per lease
	lost       int
}

// TestHoldMany holds N leases on one session for a while (flags
// -many.leases, -many.hold), on an etcd server in a process of its own,
// and measures what they cost: the time to grant them all, the streams
// and watchers on the server, the requests a second it receives while
// they are held, this process's goroutines and heap per lease, and the
// leases lost with no fault. With -many.peer, concurrency.Mutex locks on
// one session beside, in the same run. It fails on a false loss, on more
// than one keepalive stream and one watch stream for the leases, and on
// more than 0.05 goroutines a lease.
func TestHoldMany(t *testing.T) {
	var ns []int
	for f := range strings.SplitSeq(*manyLeases, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("-many.leases %q: want positive numbers, comma-separated", *manyLeases)
		}
		ns = append(ns, n)
	}
	endpoint := startManyServer(t)
	var rows []manyRow
	for _, n := range ns {
		rows = append(rows, holdMany(t, endpoint, n, "etcdlease", lockLease))
		if *manyPeer {
			rows = append(rows, holdMany(t, endpoint, n, "concurrency.Mutex", lockMutex))
		}
	}
	table := manyTable(rows)
	t.Log("\n" + table)
	if *manyReadme != "" {
		writeManySection(t, *manyReadme, table, ns)
	}
}

// lockLease takes the lease of key on s; its loss is its signal's.
func lockLease(ctx context.Context, s *concurrency.Session, key string) (any, func() error, error) {
	l, err := etcdlease.Lock(ctx, s, key)
	if err != nil {
		return nil, nil, err
	}
	return l, l.Signal().Err, nil
}

// lockMutex takes etcd's mutex of key on s, which tells no loss.
func lockMutex(ctx context.Context, s *concurrency.Session, key string) (any, func() error, error) {
	m := concurrency.NewMutex(s, key)
	if err := m.Lock(ctx); err != nil {
		return nil, nil, err
	}
	return m, nil, nil
}

// holdMany holds n locks on one session of a client of its own, and
// returns what they cost.
// The holder keeps what lock returns, as it would to release it: a lease,
// a mutex.
func holdMany(t *testing.T, endpoint string, n int, client string, lock func(context.Context, *concurrency.Session, string) (any, func() error, error)) manyRow {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prefix := fmt.Sprintf("/many/%s/%d/", client, n)
	row := manyRow{client: client, leases: n}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()

	kept := make([]any, n)
	losses := make([]func() error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				h, loss, err := lock(t.Context(), s, prefix+strconv.Itoa(i))
				if err != nil {
					errs <- err
					return
				}
				kept[i], losses[i] = h, loss
			}
		})
	}
	wg.Wait()
	row.grant = time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatalf("%s: lock: %v", client, err)
	}

	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	row.goroutines = runtime.NumGoroutine() - goroutines
	row.heap = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
	m0 := serverMetrics(t, endpoint)
	held := time.Now()
	time.Sleep(*manyHold)
	m1 := serverMetrics(t, endpoint)
	row.reqPerSec = (sum(m1, "grpc_server_msg_received_total") - sum(m0, "grpc_server_msg_received_total")) / time.Since(held).Seconds()
	row.keepAlives = openStreams(m1, "LeaseKeepAlive")
	row.watchSt = int(sum(m1, "etcd_debugging_mvcc_watch_stream_total"))
	row.watchers = int(sum(m1, "etcd_debugging_mvcc_watcher_total"))

	resp, err := cli.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	row.lost = n - int(resp.Count)
	for _, loss := range losses {
		if loss != nil && loss() != nil {
			row.lost++
			if row.lost <= 3 {
				t.Errorf("%s: a lease was lost with no fault: %v", client, loss())
			}
		}
	}
	runtime.KeepAlive(kept)
	if row.lost > 0 {
		t.Errorf("%s: %d of %d locks lost with no fault, want 0", client, row.lost, n)
	}
	if client == "etcdlease" {
		// The session's own keepalive stream, and the leases'.
		if row.keepAlives > 2 || row.watchSt > 1 {
			t.Errorf("%d keepalive streams and %d watch streams open on the server for %d leases, want 2 and 1", row.keepAlives, row.watchSt, n)
		}
		if per := float64(row.goroutines) / float64(n); per > 0.05 {
			t.Errorf("%d goroutines more for %d leases: %.3f a lease, want at most 0.05", row.goroutines, n, per)
		}
	}
	// Revoked at once: the keys go with the session's etcd lease.
	if _, err := cli.Revoke(t.Context(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	return row
}

// manyTable returns the Markdown table of rows.
func manyTable(rows []manyRow) string {
	var b strings.Builder
	b.WriteString("| client | locks held | time to grant all | keepalive streams on the server | watch streams | watchers | requests/s while holding | goroutines more | heap per lock | false losses |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %v | %d | %d | %s | %.1f | %d | %s | %d |\n",
			r.client, thousands(r.leases), r.grant.Round(time.Millisecond), r.keepAlives, r.watchSt, thousands(r.watchers),
			r.reqPerSec, r.goroutines, heapPer(r.heap), r.lost)
	}
	return b.String()
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func heapPer(b float64) string {
	if b >= 1024 {
		return fmt.Sprintf("%.2f KiB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}

// The markers of the README's table of many leases.
const (
	manyBegin = "<!-- hold-many: begin -->"
	manyEnd   = "<!-- hold-many: end -->"
)

// writeManySection puts table, with the machine and the command, between
// the markers of the README at path.
func writeManySection(t *testing.T, path, table string, ns []int) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(string(old), manyBegin), strings.Index(string(old), manyEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no markers %q and %q", path, manyBegin, manyEnd)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fields := strings.Fields(string(load))
	if len(fields) > 3 {
		fields = fields[:3]
	}
	var b strings.Builder
	b.WriteString(manyBegin + "\n")
	fmt.Fprintf(&b, "`%s`, each count held %v, on %s, %d cores, %s, one embedded etcd server in a process of its own; load average %s at the end.",
		*manyCommand, *manyHold, cpuModel(), runtime.NumCPU(), runtime.Version(), strings.Join(fields, " "))
	if *manyNote != "" {
		b.WriteString(" " + *manyNote)
	}
	b.WriteString(" The locks are taken from 64 goroutines; goroutines and heap are the holding process's, after `runtime.GC`; a session's etcd lease has a TTL of 10 s.\n\n")
	b.WriteString(table)
	b.WriteString(manyEnd)
	out := string(old[:i]) + b.String() + string(old[j+len(manyEnd):])
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
