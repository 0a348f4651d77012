package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/internal/lockset/lockcycle"
)

// cycleClient is one line of the lock-cycle table: the issuer or a peer,
// and how it makes a Locker, a client of its own, on the server at addr.
type cycleClient struct {
	name   string
	learns string // how its waiter learns the subject is free
	open   func(ctx context.Context, addr string) (lease.Locker, func(), error)
}

// cycleCoordinator is a server the table measures, and its clients.
type cycleCoordinator struct {
	issuer  string // the lock-set runs' name, which starts the server
	name    string // the table's
	clients []cycleClient
	version func(ctx context.Context, addr string) (string, error)
}

// cycleCoordinators are the coordinators of the table, in its order.
// Kubernetes is left out: see docs/benchmarks.md.
var cycleCoordinators = []cycleCoordinator{redisCycle, etcdCycle, pgCycle, mysqlCycle}

// cycleMain is "lockset cycle": the lock cycle of each issuer beside its
// peers, each coordinator's clients on one server it starts, into one
// table; printed, and written into the doc's section when -doc names one.
func cycleMain(args []string) error {
	fs := flag.NewFlagSet("cycle", flag.ExitOnError)
	only := fs.String("coordinators", "redis,etcd,pg,mysql", "the coordinators to measure, by their lock-set names")
	doc := fs.String("doc", "", "the markdown file whose lock-cycle section the table replaces")
	command := fs.String("command", "make bench-lock", "the command the doc names as the table's")
	commit := fs.String("commit", "", "the commit the doc names as the one measured")
	var c lockcycle.Config
	fs.IntVar(&c.Cycles, "cycles", 3000, "the most cycles from one goroutine")
	fs.DurationVar(&c.Budget, "budget", 6*time.Second, "how long the one-goroutine cycles may go on once 200 are done")
	fs.IntVar(&c.Goroutines, "goroutines", 32, "the goroutines of the throughput")
	fs.IntVar(&c.PerGoroutine, "per-goroutine", 20, "the cycles each goroutine of the throughput makes")
	fs.IntVar(&c.HandOvers, "handovers", 30, "the hand-overs of the contended subject")
	fs.DurationVar(&c.Settle, "settle", 100*time.Millisecond, "how long a waiter waits in Lock before the holder unlocks, plus up to half as long at random")
	fs.Parse(args)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	loadBefore := loadAverage()
	start := time.Now()
	var rows []lockcycle.Row
	var versions []string
	for _, co := range cycleCoordinators {
		if !strings.Contains(","+*only+",", ","+co.issuer+",") {
			continue
		}
		rs, version, err := measureCoordinator(co, self, c)
		if err != nil {
			return fmt.Errorf("%s: %w", co.name, err)
		}
		rows = append(rows, rs...)
		versions = append(versions, co.name+" "+version)
	}
	body := cycleDocBody(lockcycle.Table(rows), cycleRun{command: *command, commit: *commit, versions: versions, config: c,
		loadBefore: loadBefore, loadAfter: loadAverage(), took: time.Since(start), at: start})
	fmt.Print("\n" + body)
	if *doc == "" {
		return nil
	}
	b, err := os.ReadFile(*doc)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(*doc, []byte(lockcycle.Replace(string(b), "## The lock cycle", body)), 0o644)
}

// measureCoordinator starts co's server, measures each of its clients on
// it, and stops it.
func measureCoordinator(co cycleCoordinator, self string, c lockcycle.Config) ([]lockcycle.Row, string, error) {
	dir, err := os.MkdirTemp("", "lockcycle-"+co.issuer+"-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	r := &runner{issuer: co.issuer, dir: dir, ttl: 2 * time.Second, self: self, holders: map[string]string{}}
	addr, err := r.startServer()
	defer func() {
		for _, s := range r.servers() {
			if s != nil {
				s.signal(syscall.SIGKILL)
				<-s.done
			}
		}
		if r.serverDir != "" {
			os.RemoveAll(r.serverDir)
		}
	}()
	if err != nil {
		return nil, "", fmt.Errorf("start the server: %w", err)
	}
	ctx := context.Background()
	version, err := co.version(ctx, addr)
	if err != nil {
		return nil, "", fmt.Errorf("the server's version: %w", err)
	}
	var rows []lockcycle.Row
	for _, cl := range co.clients {
		fmt.Printf("lockcycle: %s, %s ...", co.name, cl.name)
		res, err := measureClient(ctx, cl, addr, c)
		if err != nil {
			fmt.Println()
			return nil, "", fmt.Errorf("%s: %w", cl.name, err)
		}
		fmt.Printf(" cycle p50 %s p99 %s (%d), %s/s at %d goroutines, hand-over p50 %s max %s (%d)\n",
			lockcycle.Duration(res.CycleP50), lockcycle.Duration(res.CycleP99), res.Cycles, lockcycle.PerSecond(res.PerSecond),
			res.Goroutines, lockcycle.Duration(res.HandOverP50), lockcycle.Duration(res.HandOverMax), res.HandOvers)
		rows = append(rows, lockcycle.Row{Coordinator: co.name, Client: cl.name, Learns: cl.learns, Result: res})
	}
	return rows, version, nil
}

// measureClient opens two clients of cl, the holder and the waiter, and
// measures them.
func measureClient(ctx context.Context, cl cycleClient, addr string, c lockcycle.Config) (lockcycle.Result, error) {
	a, closeA, err := cl.open(ctx, addr)
	if err != nil {
		return lockcycle.Result{}, err
	}
	defer closeA()
	b, closeB, err := cl.open(ctx, addr)
	if err != nil {
		return lockcycle.Result{}, err
	}
	defer closeB()
	c.Prefix = "cycle-" + cl.name
	return lockcycle.Measure(ctx, a, b, c)
}

// cycleRun is what the doc says of the run beside the table.
type cycleRun struct {
	command, commit       string
	versions              []string
	config                lockcycle.Config
	loadBefore, loadAfter string
	took                  time.Duration
	at                    time.Time
}

func cycleDocBody(table string, r cycleRun) string {
	var b strings.Builder
	commit := ""
	if r.commit != "" {
		commit = " of commit `" + r.commit + "`"
	}
	fmt.Fprintf(&b, "One `%s`%s on %s, %v in all: %s, %d cores (%s), %s.\n", r.command, commit, r.at.UTC().Format("2 January 2006"),
		r.took.Round(time.Second), strings.Join(r.versions, ", "), runtime.NumCPU(), cpuModel(), runtime.Version())
	fmt.Fprintf(&b, "The load average (1, 5, 15 min) was %s at the start and %s at the end", r.loadBefore, r.loadAfter)
	if loaded(r.loadBefore) || loaded(r.loadAfter) {
		fmt.Fprintf(&b, ", more than the %d cores: other work shared the machine, so compare the rows, which shared it alike, more than the figures", runtime.NumCPU())
	}
	b.WriteString(".\n\n")
	b.WriteString(table)
	fmt.Fprintf(&b, `
Each client locks through the one interface `+"`lease.Locker`"+`, measured by one function,
[lockcycle.Measure](../internal/lockset/lockcycle/measure.go), against one server per coordinator
that all of its clients share, each server a process of its own on the loopback interface. A cycle is
Lock of a free subject then Unlock, timed from Lock's call to Unlock's return, each on a new subject:
up to %d from one goroutine, fewer where %v did not allow them (at least 200); then %d goroutines of %d
cycles each, on subjects of their own. A hand-over is %d times on one subject: the holder holds it, a
second client of the same kind waits in Lock for %v to %v, the holder calls Unlock; the figure is the
time from that call to the return of the waiter's Lock. A peer's lease is a signal that is never lost,
and its token the peer's own or 0.
`, r.config.Cycles, r.config.Budget, r.config.Goroutines, r.config.PerGoroutine, r.config.HandOvers,
		r.config.Settle, r.config.Settle*3/2)
	return b.String()
}

// loadAverage returns the first three fields of /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], ", ")
	}
	return "unknown"
}

// loaded says whether the load average load, as loadAverage writes it, is
// above the cores in any of its fields.
func loaded(load string) bool {
	for _, f := range strings.Split(load, ", ") {
		var v float64
		if _, err := fmt.Sscan(f, &v); err == nil && v > float64(runtime.NumCPU()) {
			return true
		}
	}
	return false
}

// cpuModel returns the model name of /proc/cpuinfo's first processor.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "CPU model unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "CPU model unknown"
}
