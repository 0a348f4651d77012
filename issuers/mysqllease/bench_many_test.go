package mysqllease_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/mysqllease"
)

var (
	benchMany       = flag.Bool("bench-many", false, "run TestBenchMany: hold many leases from one *sql.DB beside GET_LOCK by hand (make bench-many-mysql)")
	benchManyLeases = flag.String("bench-many.leases", "100,1000,10000", "TestBenchMany's numbers of leases, comma-separated")
	benchManyHold   = flag.Duration("bench-many.hold", 60*time.Second, "how long TestBenchMany holds each number of leases")
	benchManyReadme = flag.String("bench-many.readme", "", "write TestBenchMany's table between the bench-many markers of this README")
	benchManyNote   = flag.String("bench-many.note", "", "a few words on the machine's load that the table's machine line adds, such as \"shared with other builds\"")
)

// benchManyMaxConns is the server's max_connections during TestBenchMany:
// the goal is 10,000 leases on a server that admits 50 connections.
const benchManyMaxConns = 50

// manyRow is one row of TestBenchMany's table.
type manyRow struct {
	client      string
	leases      int
	grant       time.Duration // time to grant all
	sessions    int           // Threads_connected while holding, less the baseline
	perSecond   float64       // Questions a second while holding, less the reader's own
	goroutines  int           // goroutines while holding, less the baseline
	heapPerItem float64       // heap bytes a lease while holding, less the baseline, after a GC
	lost        int           // leases lost while holding
}

// TestBenchMany holds N leases (100, 1,000 and 10,000) from one *sql.DB
// with the default Config on a server of max_connections 50, for a minute
// each, and measures the time to grant them all, the server's sessions, its
// statements a second while holding, the goroutines, the heap a lease and
// the false losses; beside it, the same N locks taken with GET_LOCK by hand
// on one connection, which a goroutine pings once a second. It runs only
// with -bench-many (make bench-many-mysql).
func TestBenchMany(t *testing.T) {
	if !*benchMany {
		t.Skip("run with -bench-many (make bench-many-mysql)")
	}
	admin := rootDB(t, server)
	admin.SetMaxIdleConns(1)
	admin.SetMaxOpenConns(1)
	var old int
	if err := admin.QueryRow("SELECT @@GLOBAL.max_connections").Scan(&old); err != nil {
		t.Fatal(err)
	}
	mustExec(t, admin, fmt.Sprintf("SET GLOBAL max_connections = %d", benchManyMaxConns))
	defer admin.Exec(fmt.Sprintf("SET GLOBAL max_connections = %d", old))
	var rows []manyRow
	for _, f := range strings.Split(*benchManyLeases, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("-bench-many.leases: %q is not a positive number", f)
		}
		rows = append(rows, holdLeases(t, admin, n), holdByHand(t, admin, n))
		t.Logf("%+v", rows[len(rows)-2])
		t.Logf("%+v", rows[len(rows)-1])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| client | leases | time to grant all | server sessions | statements/s while holding | goroutines | heap a lease | false losses |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %v | %d | %.1f | %d | %.0f B | %d |\n", r.client, r.leases, r.grant.Round(time.Millisecond), r.sessions, r.perSecond, r.goroutines, r.heapPerItem, r.lost)
	}
	machine := fmt.Sprintf("%s%d cores, %s/%s, %s", cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if *benchManyNote != "" {
		machine += ", " + *benchManyNote
	}
	fmt.Fprintf(&b, "\nHeld %v each, on MariaDB with max_connections %d; Config{} (ServerTimeout 10 s, Heartbeat 1 s, Sessions 4). Machine: %s. Command: `make bench-many-mysql`, %s.\n",
		*benchManyHold, benchManyMaxConns, machine, time.Now().UTC().Format("2006-01-02"))
	t.Log("\n" + b.String())
	if *benchManyReadme != "" {
		if err := faulttrial.WriteSection(*benchManyReadme, "bench-many", b.String()); err != nil {
			t.Fatal(err)
		}
	}
}

// cpuModel returns the processor's family as the project names machines
// ("AMD EPYC, "), or "" where /proc/cpuinfo does not say.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			f := strings.Fields(v)
			if len(f) >= 2 {
				return f[0] + " " + f[1] + ", "
			}
		}
	}
	return ""
}

// status reads a global status counter of the server.
func status(t *testing.T, admin *sql.DB, name string) int64 {
	t.Helper()
	var k string
	var v int64
	if err := admin.QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&k, &v); err != nil {
		t.Fatalf("SHOW GLOBAL STATUS LIKE %q: %v", name, err)
	}
	return v
}

// heap returns the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// measure holds for -bench-many.hold and fills the row's server and
// process figures, against the baselines read before the locks.
func measure(t *testing.T, admin *sql.DB, r *manyRow, threads0 int64, goroutines0 int, heap0 uint64) {
	t.Helper()
	r.sessions = int(status(t, admin, "Threads_connected") - threads0)
	r.goroutines = runtime.NumGoroutine() - goroutines0
	r.heapPerItem = (float64(heap()) - float64(heap0)) / float64(r.leases)
	q0 := status(t, admin, "Questions")
	start := time.Now()
	time.Sleep(*benchManyHold)
	q1 := status(t, admin, "Questions")
	// The reader's own SHOW STATUS counts once among them.
	r.perSecond = float64(q1-q0-1) / time.Since(start).Seconds()
}

// holdLeases is TestBenchMany's row of n leases.
func holdLeases(t *testing.T, admin *sql.DB, n int) manyRow {
	r := manyRow{client: "mysqllease", leases: n}
	db := open(t, server.DSN("root", ""))
	defer db.Close()
	threads0 := status(t, admin, "Threads_connected")
	goroutines0, heap0 := runtime.NumGoroutine(), heap()
	base := fmt.Sprintf("%s-%d", subject(t), n)
	leases := make([]*mysqllease.Lease, n)
	var next atomic.Int64
	var failed atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				l, err := mysqllease.Lock(ctx, db, fmt.Sprintf("%s-%d", base, i))
				cancel()
				if err != nil {
					failed.Store(err)
					return
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	r.grant = time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("%d leases: Lock = %v", n, err)
	}
	measure(t, admin, &r, threads0, goroutines0, heap0)
	defer db.Close()
	for _, l := range leases {
		if l.Signal().Err() != nil {
			r.lost++
		}
	}
	for _, l := range leases {
		l.Unlock(context.Background())
	}
	settle(t, admin, threads0)
	return r
}

// settle waits until the server's sessions are back to threads0, the
// sessions of the row before closed, so that the next row's baseline holds
// none of them.
func settle(t *testing.T, admin *sql.DB, threads0 int64) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for status(t, admin, "Threads_connected") > threads0 {
		if time.Now().After(deadline) {
			t.Fatalf("the server's sessions are not back to %d %v after the row", threads0, waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdByHand is TestBenchMany's row of n locks taken with GET_LOCK by hand
// on one connection, pinged once a second.
func holdByHand(t *testing.T, admin *sql.DB, n int) manyRow {
	r := manyRow{client: "GET_LOCK by hand, one connection", leases: n}
	db := open(t, server.DSN("root", ""))
	defer db.Close()
	threads0 := status(t, admin, "Threads_connected")
	goroutines0, heap0 := runtime.NumGoroutine(), heap()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	base := fmt.Sprintf("%s-hand-%d", subject(t), n)
	start := time.Now()
	for i := range n {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", fmt.Sprintf("%s-%d", base, i)).Scan(&got); err != nil || got.Int64 != 1 {
			t.Fatalf("GET_LOCK by hand = %v, %v", got, err)
		}
	}
	r.grant = time.Since(start)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				conn.PingContext(ctx)
			}
		}
	})
	measure(t, admin, &r, threads0, goroutines0, heap0)
	close(stop)
	wg.Wait()
	if _, err := conn.ExecContext(ctx, "DO RELEASE_ALL_LOCKS()"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	db.Close()
	settle(t, admin, threads0)
	return r
}
