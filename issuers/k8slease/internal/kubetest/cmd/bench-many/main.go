// Command bench-many holds many leases from one clientset on a kubetest
// server (etcd in this process, kube-apiserver a child of it) for a while,
// k8slease's beside client-go's LeaderElector, one elector per Lease, and
// prints a Markdown table: the time to grant all, the watches the apiserver
// serves for Leases (apiserver_longrunning_requests), the requests a second
// the clientset sends while holding, the goroutines and heap the leases add
// to the process, and the leases lost with no fault.
//
//	go run ./internal/kubetest/cmd/bench-many -n 100,1000 -hold 60s
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

const ns = "default"

func main() {
	log.SetFlags(0)
	counts := flag.String("n", "100,1000", "the numbers of leases to hold, comma-separated")
	hold := flag.Duration("hold", time.Minute, "how long to hold them")
	peer := flag.Bool("peer", true, "run client-go's LeaderElector beside")
	flag.Parse()
	klog.SetLogger(logr.Discard())
	s, stop, err := kubetest.StartShared()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	fmt.Printf("%d CPUs, %s, hold %v; the zero Config (15 s lease, a renewal each 2 s), one clientset of QPS n+50, Burst 100\n\n", runtime.NumCPU(), runtime.Version(), *hold)
	fmt.Println("| leases | client | time to grant all | Lease watches on the apiserver (its own subtracted) | requests/s while holding | goroutines per lease: median, most | heap per lease | lost with no fault |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	// A first, short round of each, not reported: client-go's and the
	// process's allocations made once are not a lease's.
	holdLeases(s, 10, time.Second)
	if *peer {
		holdElectors(s, 10, time.Second)
	}
	for _, f := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			log.Fatalf("bench-many: -n %q: not a positive count", f)
		}
		base := watches(s) // the apiserver's own watches of Leases
		runs := []func(*kubetest.Server, int, time.Duration) result{holdLeases}
		if *peer {
			runs = append(runs, holdElectors)
		}
		for _, run := range runs {
			r := run(s, n, *hold)
			fmt.Printf("| %d | %s | %v | %d | %.1f | %.3f, %.3f | %s | %d |\n", n, r.client, r.grant.Round(time.Millisecond),
				r.watches-base, r.rps, float64(r.goroutines)/float64(n), float64(r.peak)/float64(n), bytes(r.heap/int64(n)), r.lost)
		}
	}
}

type result struct {
	client     string
	grant      time.Duration
	watches    int
	rps        float64
	goroutines int // the median of the samples while holding
	peak       int // the most
	heap       int64
	lost       int
}

// measure samples, for hold, the goroutines the leases add each 250 ms, at
// every phase of the second (the renewals of k8slease start together just
// after the start of one), their heap once, after a collection, and the
// apiserver's watches; and counts the clientset's requests.
func (r *result) measure(s *kubetest.Server, c *counter, g0 int, h0 int64, hold time.Duration) {
	before, start := c.n.Load(), time.Now()
	var samples []int
	for i := 0; time.Since(start) < hold; i++ {
		if i == 4 {
			_, h1 := usage()
			r.heap = h1 - h0
			r.watches = watches(s)
		}
		samples = append(samples, runtime.NumGoroutine()-g0)
		time.Sleep(250*time.Millisecond + time.Duration(i%4)*10*time.Millisecond)
	}
	r.rps = float64(c.n.Load()-before) / time.Since(start).Seconds()
	slices.Sort(samples)
	r.goroutines, r.peak = samples[len(samples)/2], samples[len(samples)-1]
}

// counter counts a clientset's requests.
type counter struct{ n atomic.Int64 }

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		c.n.Add(1)
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func client(s *kubetest.Server, n int, c *counter) kubernetes.Interface {
	cfg := rest.CopyConfig(s.Config())
	cfg.QPS, cfg.Burst = float32(n+50), 100
	cfg.WrapTransport = c.wrap
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	return cs
}

// usage returns the process's goroutines and live heap after a collection.
func usage() (int, int64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), int64(m.HeapAlloc)
}

// watches returns the watches of Leases the apiserver serves now.
func watches(s *kubetest.Server) int {
	body, err := s.Clientset().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	total := 0
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `resource="leases"`) || !strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		total += int(v)
	}
	return total
}

func names(kind string, n int) []string {
	run := time.Now().UnixNano()
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("many-%s-%d-%d-%d", kind, n, run, i)
	}
	return out
}

// holdLeases takes n k8slease leases through one clientset, 32 Locks at a
// time, holds them, and releases them.
func holdLeases(s *kubetest.Server, n int, hold time.Duration) result {
	var c counter
	cs := client(s, n, &c)
	r := result{client: "k8slease"}
	g0, h0 := usage()
	leases := make([]*k8slease.Lease, n)
	var slowest longest
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i, name := range names("k8slease", n) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			l, err := k8slease.Lock(context.Background(), cs, ns, name, "bench")
			if err != nil {
				log.Fatal(err)
			}
			leases[i] = l
			slowest.max(time.Since(t0))
		}()
	}
	wg.Wait()
	r.grant = time.Since(start)
	log.Printf("k8slease, %d leases: the slowest Lock took %v", n, slowest.get().Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the first renewals
	r.measure(s, &c, g0, h0, hold)
	for _, l := range leases {
		if l.Signal().Err() != nil {
			r.lost++
		}
	}
	for _, l := range leases {
		l.Unlock(context.Background())
	}
	return r
}

// holdElectors runs n client-go LeaderElectors, one a Lease, through one
// clientset, with client-go's recommended 15 s lease, 10 s renew deadline
// and 2 s retry period, until each leads, holds, and cancels them
// (ReleaseOnCancel). A leader that stops leading before the cancel is lost
// with no fault.
func holdElectors(s *kubetest.Server, n int, hold time.Duration) result {
	var c counter
	cs := client(s, n, &c)
	r := result{client: "LeaderElector"}
	g0, h0 := usage()
	ctx, cancel := context.WithCancel(context.Background())
	var led sync.WaitGroup
	var stopping, lost atomic.Int64
	var done sync.WaitGroup
	start := time.Now()
	for _, name := range names("elector", n) {
		led.Add(1)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
				Client:     cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: "bench"},
			},
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { led.Done() },
				OnStoppedLeading: func() {
					if stopping.Load() == 0 {
						lost.Add(1)
					}
				},
			},
		})
		if err != nil {
			log.Fatal(err)
		}
		done.Add(1)
		go func() {
			defer done.Done()
			le.Run(ctx)
		}()
	}
	led.Wait()
	r.grant = time.Since(start)
	time.Sleep(2 * time.Second)
	r.measure(s, &c, g0, h0, hold)
	stopping.Store(1)
	r.lost = int(lost.Load())
	cancel()
	done.Wait()
	return r
}

func bytes(b int64) string {
	if b >= 1<<10 {
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// longest keeps the longest of durations noted from many goroutines.
type longest struct {
	mu sync.Mutex
	d  time.Duration
}

func (l *longest) max(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = max(l.d, d)
}

func (l *longest) get() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d
}
