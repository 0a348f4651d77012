package natslease_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
)

var (
	manyLeases  = flag.String("many.leases", "1000", "the counts of leases TestHoldMany holds, comma-separated")
	manyHold    = flag.Duration("many.hold", 5*time.Second, "how long TestHoldMany holds them")
	manyReadme  = flag.String("many.readme", "", "the README whose many-leases table TestHoldMany writes, if any")
	manyCommand = flag.String("many.command", "make e2e-nats", "the command named under the many-leases table")
)

// manyTTL is the TTL of TestHoldMany's leases and hand-written holders.
const manyTTL = 10 * time.Second

// manyRow is one line of TestHoldMany's table.
type manyRow struct {
	holder     string
	n          int
	grant      time.Duration
	goroutines float64 // a lease
	heap       float64 // bytes a lease
	consumers  int
	lost       int64
}

func heapNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestHoldMany holds -many.leases leases of one client for -many.hold on a
// nats-server of its own, then as many hand-written holders (Create, then
// Update every third of the TTL, each in a goroutine of its own, as users
// write them), and tabulates the cost of each and the leases lost with no
// fault, which must be none.
func TestHoldMany(t *testing.T) {
	var rows []manyRow
	for _, f := range strings.Split(*manyLeases, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("-many.leases: %q is not a count", f)
		}
		srv := natstest.StartT(t)
		url := srv.URL(natstest.App)
		if err := createBucket(url, "many", 1); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, holdLeases(t, url, n), holdPeers(t, url, n))
		srv.Close()
	}
	var b strings.Builder
	b.WriteString("| holder | leases | grant all | goroutines a lease | heap a lease | consumers of the bucket | lost with no fault |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %v | %.3f | %.0f B | %d | %d |\n", r.holder, r.n, r.grant.Round(time.Millisecond), r.goroutines, r.heap, r.consumers, r.lost)
	}
	fmt.Fprintf(&b, "\nEach held for %v with a TTL of %v, on a nats-server of its own. Machine: %s. Command: `%s`, %s.\n",
		*manyHold, manyTTL, faulttrial.Machine(), *manyCommand, time.Now().Format("2006-01-02"))
	t.Logf("\n%s", b.String())
	for _, r := range rows {
		if r.lost > 0 {
			t.Errorf("%s: %d of %d lost with no fault", r.holder, r.lost, r.n)
		}
	}
	if *manyReadme != "" {
		if err := faulttrial.WriteSection(*manyReadme, "many", b.String()); err != nil {
			t.Fatal(err)
		}
	}
}

func consumers(t *testing.T, nc *nats.Conn) int {
	js, _ := jetstream.New(nc)
	st, err := js.Stream(t.Context(), "KV_many")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

func holdLeases(t *testing.T, url string, n int) manyRow {
	nc := client(t, url)
	cfg := natslease.Config{Bucket: "many", TTL: manyTTL}
	g0, h0 := runtime.NumGoroutine(), heapNow()
	start := time.Now()
	ls := make([]*natslease.Lease, n)
	for i := range ls {
		l, err := cfg.Lock(t.Context(), nc, fmt.Sprintf("lease-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	r := manyRow{holder: "natslease, one client", n: n, grant: time.Since(start)}
	r.goroutines = float64(runtime.NumGoroutine()-g0) / float64(n)
	r.heap = float64(int64(heapNow())-int64(h0)) / float64(n)
	r.consumers = consumers(t, nc)
	time.Sleep(*manyHold)
	for _, l := range ls {
		if l.Signal().Err() != nil {
			r.lost++
		}
		l.Unlock(context.Background())
	}
	return r
}

func holdPeers(t *testing.T, url string, n int) manyRow {
	nc := client(t, url)
	kv := bucket(t, nc, "many")
	g0, h0 := runtime.NumGoroutine(), heapNow()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var lost atomic.Int64
	start := time.Now()
	for i := range n {
		key := fmt.Sprintf("peer-%d", i)
		rev, err := kv.Create(t.Context(), key, []byte("peer"), jetstream.KeyTTL(manyTTL))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			tk := time.NewTicker(manyTTL / 3)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					kv.Purge(context.Background(), key)
					return
				case <-tk.C:
				}
				uctx, ucancel := context.WithTimeout(ctx, manyTTL/3)
				var err error
				rev, err = kv.Update(uctx, key, []byte("peer"), rev)
				ucancel()
				if err != nil {
					if ctx.Err() == nil {
						lost.Add(1)
					}
					<-ctx.Done()
					return
				}
			}
		})
	}
	r := manyRow{holder: "hand-written Create then Update, one client", n: n, grant: time.Since(start)}
	r.goroutines = float64(runtime.NumGoroutine()-g0) / float64(n)
	r.heap = float64(int64(heapNow())-int64(h0)) / float64(n)
	r.consumers = consumers(t, nc)
	time.Sleep(*manyHold)
	cancel()
	wg.Wait()
	r.lost = lost.Load()
	return r
}
