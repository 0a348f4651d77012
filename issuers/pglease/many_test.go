package pglease_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

var (
	manyCounts = flag.String("pg.many", "1000", "the numbers of leases, comma-separated, that TestManyLeases holds from one pool")
	manyHold   = flag.Duration("pg.hold", 3*time.Second, "how long TestManyLeases holds each number of leases")
	manyReport = flag.String("pg.manyreport", "", "write TestManyLeases's table between the many markers of this README")
)

// manyServer are the settings of TestManyLeases's server: 50 connections,
// as a small server or a role's limit allows, and a lock table for 10,000
// advisory locks and more (max_locks_per_transaction × (max_connections +
// the server's own processes): 256 × 72).
var manyServer = []string{"max_connections=50", "max_locks_per_transaction=256"}

// manyRow is one line of TestManyLeases's table.
type manyRow struct {
	client       string
	leases       int
	grantAll     time.Duration
	sessions     int     // server sessions of the process, the pool's among them
	lockSessions int     // server sessions that hold the advisory locks
	sent         float64 // statements a second sent while holding, by the process's count
	goroutines   float64 // goroutines per lease
	heap         float64 // bytes of heap per lease
	falseLosses  int
}

// TestManyLeases holds -pg.many leases from one pool of 8 connections, on a
// server of max_connections 50, for -pg.hold, with the default Config, and
// beside them as many locks taken by hand with pg_advisory_lock on one
// connection. It checks that every lease is granted, that the process uses
// no more than 20 server sessions, that none is lost while held, that the
// sessions send no statement but their heartbeats while holding, and that
// the process keeps at most 0.05 goroutines a lease (beyond 100 leases);
// it prints the table (make bench-many-pg writes it into the README).
func TestManyLeases(t *testing.T) {
	var counts []int
	for _, f := range strings.Split(*manyCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("-pg.many %q: want positive numbers, comma-separated", *manyCounts)
		}
		counts = append(counts, n)
	}
	loadStart := loadAverage()
	srv, err := pgtest.StartWith(manyServer...)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var rows []manyRow
	for _, n := range counts {
		t.Run(fmt.Sprintf("pglease-%d", n), func(t *testing.T) { rows = append(rows, holdMany(t, srv, n, *manyHold)) })
		t.Run(fmt.Sprintf("byhand-%d", n), func(t *testing.T) { rows = append(rows, holdByHand(t, srv, n, *manyHold)) })
	}
	if t.Failed() {
		return
	}
	table := manyTable(rows, *manyHold, loadStart, loadAverage())
	t.Log("\n" + table)
	if *manyReport != "" {
		if err := writeBetween(*manyReport, "<!-- many:begin -->", "<!-- many:end -->", table); err != nil {
			t.Fatal(err)
		}
	}
}

// holdMany takes n leases from a new pool of 8 connections, holds them for
// hold, checks them and releases them.
func holdMany(t *testing.T, srv *pgtest.Server, n int, hold time.Duration) manyRow {
	t.Helper()
	ctx := context.Background()
	admin := connect(t, srv, srv.Addr())
	pglease.CloseIdleSessions()
	before := goroutinesAndHeap()
	pcfg, err := pgxpool.ParseConfig(srv.ConnString(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var cfg pglease.Config
	leases := make([]*pglease.Lease, n)
	errs := make(chan error, n)
	start := time.Now()
	var wg sync.WaitGroup
	const workers = 32
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				lctx, cancel := context.WithTimeout(ctx, waitTimeout)
				l, err := cfg.Lock(lctx, pool, fmt.Sprintf("many-%d-%d", n, i))
				cancel()
				if err != nil {
					errs <- err
					return
				}
				leases[i] = l
			}
		}()
	}
	wg.Wait()
	row := manyRow{client: "pglease", leases: n, grantAll: time.Since(start)}
	defer func() {
		for _, l := range leases {
			if l != nil {
				l.Unlock(ctx)
			}
		}
		pglease.CloseIdleSessions()
	}()
	close(errs)
	for err := range errs {
		t.Fatalf("Lock of one of %d leases = %v", n, err)
	}
	row.sessions, row.lockSessions = serverSessions(t, admin)
	after := goroutinesAndHeap()
	row.goroutines = float64(after.goroutines-before.goroutines) / float64(n)
	row.heap = float64(after.heap-before.heap) / float64(n)
	sent0 := pglease.StatementsSent()
	time.Sleep(hold)
	row.sent = float64(pglease.StatementsSent()-sent0) / hold.Seconds()
	for _, l := range leases {
		if l.Signal().Err() != nil {
			row.falseLosses++
		}
	}
	shared, _ := pglease.SharedSessions()
	if row.falseLosses != 0 {
		t.Errorf("%d of %d leases lost while held on an idle server, want 0", row.falseLosses, n)
	}
	if row.sessions > 20 {
		t.Errorf("%d server sessions for %d leases from a pool of 8, want at most 20", row.sessions, n)
	}
	if shared > pglease.DefaultSessions {
		t.Errorf("%d shared sessions, want at most %d", shared, pglease.DefaultSessions)
	}
	// Each session sends a heartbeat a second; a tick may fall on either
	// side of the window.
	if most := float64(shared) * (hold.Seconds()/pglease.DefaultHeartbeat.Seconds() + 1) / hold.Seconds(); row.sent > most {
		t.Errorf("%.1f statements a second while holding %d leases on %d sessions, want at most their heartbeats, %.1f", row.sent, n, shared, most)
	}
	if n > 100 && row.goroutines > 0.05 {
		t.Errorf("%.3f goroutines a lease at %d leases, want at most 0.05", row.goroutines, n)
	}
	return row
}

// holdByHand takes n advisory locks with pg_advisory_lock on one connection,
// holds them for hold, and releases them: the peer of holdMany.
func holdByHand(t *testing.T, srv *pgtest.Server, n int, hold time.Duration) manyRow {
	t.Helper()
	ctx := context.Background()
	admin := connect(t, srv, srv.Addr())
	before := goroutinesAndHeap()
	conn := connect(t, srv, srv.Addr())
	start := time.Now()
	for i := range n {
		if _, err := conn.Exec(ctx, "select pg_advisory_lock($1)", pglease.Key(fmt.Sprintf("hand-%d-%d", n, i))); err != nil {
			t.Fatalf("pg_advisory_lock: %v", err)
		}
	}
	row := manyRow{client: "pg_advisory_lock by hand, one connection", leases: n, grantAll: time.Since(start)}
	row.sessions, row.lockSessions = serverSessions(t, admin)
	after := goroutinesAndHeap()
	row.goroutines = float64(after.goroutines-before.goroutines) / float64(n)
	row.heap = float64(after.heap-before.heap) / float64(n)
	time.Sleep(hold) // sending nothing
	if _, err := conn.Exec(ctx, "select pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	return row
}

type usage struct {
	goroutines int
	heap       uint64
}

func goroutinesAndHeap() usage {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return usage{runtime.NumGoroutine(), m.HeapAlloc}
}

// serverSessions returns the client sessions on the server beside admin's,
// and how many of them hold advisory locks.
func serverSessions(t *testing.T, admin *pgx.Conn) (sessions, holding int) {
	t.Helper()
	err := admin.QueryRow(context.Background(), "select (select count(*) from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()), "+
		"(select count(distinct pid) from pg_locks where locktype = 'advisory' and granted)").Scan(&sessions, &holding)
	if err != nil {
		t.Fatal(err)
	}
	return sessions, holding
}

// manyTable returns the table of rows, for the README.
func manyTable(rows []manyRow, hold time.Duration, loadStart, loadEnd string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| client | leases | time to grant all | server sessions (locks on) | statements/s holding | goroutines per lease | heap per lease | false losses in %v |\n", hold)
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %v | %d (%d) | %s | %.4f | %.0f B | %s |\n", r.client, r.leases, r.grantAll.Round(time.Millisecond),
			r.sessions, r.lockSessions, sentCell(r), r.goroutines, r.heap, lossCell(r))
	}
	fmt.Fprintf(&b, "\nMachine: %s, %d cores, %s/%s, %s; 1-minute load average %s at the start and %s at the end, the run's own server included. Command: `make bench-many-pg` (`-pg.many=%s -pg.hold=%v`), %s.\n",
		cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), loadStart, loadEnd, *manyCounts, hold, time.Now().UTC().Format("2006-01-02"))
	return b.String()
}

func sentCell(r manyRow) string {
	if r.client != "pglease" {
		return "0 (none sent)"
	}
	return fmt.Sprintf("%.1f", r.sent)
}

func lossCell(r manyRow) string {
	if r.client != "pglease" {
		return "–"
	}
	return strconv.Itoa(r.falseLosses)
}

// loadAverage returns the machine's 1-minute load average, as
// /proc/loadavg gives it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

// cpuModel returns the machine's CPU model, as /proc/cpuinfo names it.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// writeBetween replaces what lies between the markers begin and end in the
// file at path with text.
func writeBetween(path, begin, end, text string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s … %s markers", path, begin, end)
	}
	return os.WriteFile(path, []byte(s[:i+len(begin)]+"\n"+text+s[j:]), 0o644)
}
