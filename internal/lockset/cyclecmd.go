package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
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
	// poll, for a waiter that polls, is its longest period, which the
	// random part of a hand-over's wait spans when it is longer than the
	// run's (see lockcycle.Config.Spread).
	poll time.Duration
	// handOvers, if not 0, is the client's count of hand-overs in place
	// of the run's: fewer where each takes seconds.
	handOvers int
}

// cycleCoordinator is a server the table measures, and its clients.
type cycleCoordinator struct {
	issuer  string // the lock-set runs' name, which starts the server
	name    string // the table's
	clients []cycleClient
	version func(ctx context.Context, r *runner, addr string) (string, error)
}

// cycleCoordinators are the coordinators of the table, in its order.
var cycleCoordinators = []cycleCoordinator{redisCycle, etcdCycle, pgCycle, mysqlCycle, kubeCycle}

// cycleMain is "lockset cycle": the lock cycle of each issuer beside its
// peers, each coordinator's clients on one server it starts, into one
// table; printed, and written into the doc's section when -doc names one.
func cycleMain(args []string) error {
	fs := flag.NewFlagSet("cycle", flag.ExitOnError)
	only := fs.String("coordinators", "redis,etcd,pg,mysql,k8s", "the coordinators to measure, by their lock-set names")
	doc := fs.String("doc", "", "the markdown file whose lock-cycle section the table replaces")
	command := fs.String("command", "make bench-lock", "the command the doc names as the table's")
	commit := fs.String("commit", "", "the commit the doc names as the one measured")
	note := fs.String("note", "", "a sentence the doc adds after the machine's load, such as what else ran on it")
	var c lockcycle.Config
	fs.IntVar(&c.Cycles, "cycles", 3000, "the most cycles from one goroutine")
	fs.IntVar(&c.MinCycles, "min-cycles", 200, "the fewest cycles from one goroutine")
	fs.DurationVar(&c.Budget, "budget", 6*time.Second, "how long the one-goroutine cycles may go on once min-cycles are done")
	fs.IntVar(&c.Goroutines, "goroutines", 32, "the goroutines of the throughput")
	fs.IntVar(&c.PerGoroutine, "per-goroutine", 20, "the cycles each goroutine of the throughput makes")
	fs.IntVar(&c.HandOvers, "handovers", 30, "the hand-overs of the contended subject")
	fs.DurationVar(&c.Settle, "settle", 100*time.Millisecond, "how long a waiter waits in Lock before the holder unlocks, plus up to half as long at random (or a polling waiter's longest period)")
	rounds := fs.Int("rounds", 5, "the rounds of each coordinator: each client makes a part of each figure's samples in each")
	fs.Parse(args)
	if *rounds < 1 {
		return fmt.Errorf("cycle: -rounds %d: at least 1", *rounds)
	}
	// Each round makes a part of each count: none may be fewer than the
	// rounds.
	if least := min(c.Cycles, c.MinCycles, c.PerGoroutine, c.HandOvers); least < *rounds {
		return fmt.Errorf("cycle: -rounds %d: more than a count of cycles or hand-overs, %d", *rounds, least)
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	loadStart := loadAverage()
	load := sampleLoad(5 * time.Second)
	start := time.Now()
	var rows []lockcycle.Row
	var versions []string
	handOvers := ""
	for _, co := range cycleCoordinators {
		if !strings.Contains(","+*only+",", ","+co.issuer+",") {
			continue
		}
		for _, cl := range co.clients {
			if cl.handOvers > 0 {
				handOvers += fmt.Sprintf(" (%d for %s)", cl.handOvers, cl.name)
			}
		}
		rs, version, err := measureCoordinator(co, self, c, *rounds)
		if err != nil {
			return fmt.Errorf("%s: %w", co.name, err)
		}
		rows = append(rows, rs...)
		versions = append(versions, co.name+" "+version)
	}
	run := cycleRun{command: *command, commit: *commit, versions: versions, handOvers: handOvers, config: c, rounds: *rounds,
		note: *note, loadStart: loadStart, took: time.Since(start), at: start}
	run.loadMin, run.loadMax = load()
	body := cycleDocBody(lockcycle.Table(rows), run)
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
// it in rounds, each client a part of c in each round, and stops it.
func measureCoordinator(co cycleCoordinator, self string, c lockcycle.Config, rounds int) ([]lockcycle.Row, string, error) {
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
	version, err := co.version(ctx, r, addr)
	if err != nil {
		return nil, "", fmt.Errorf("the server's version: %w", err)
	}
	// Each client is two, the holder and the waiter, open for the whole
	// of the coordinator's rounds.
	type opened struct{ a, b lease.Locker }
	clients := make([]opened, len(co.clients))
	for i, cl := range co.clients {
		for _, l := range []*lease.Locker{&clients[i].a, &clients[i].b} {
			locker, closeLocker, err := cl.open(ctx, addr)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", cl.name, err)
			}
			defer closeLocker()
			*l = locker
		}
	}
	results := make([]lockcycle.Result, len(co.clients))
	for round := range rounds {
		for i, cl := range co.clients {
			fmt.Printf("lockcycle: %s, %s, round %d of %d\n", co.name, cl.name, round+1, rounds)
			cc := c
			if cl.handOvers > 0 {
				cc.HandOvers = cl.handOvers
			}
			cc.Spread = max(cc.Settle/2, cl.poll)
			rc := perRound(cc, rounds, round)
			rc.Prefix = fmt.Sprintf("cycle-%s-r%d", slug(cl.name), round)
			res, err := lockcycle.Measure(ctx, clients[i].a, clients[i].b, rc)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", cl.name, err)
			}
			results[i] = results[i].Add(res)
		}
	}
	var rows []lockcycle.Row
	for i, cl := range co.clients {
		rows = append(rows, lockcycle.Row{Coordinator: co.name, Client: cl.name, Learns: cl.learns, Result: results[i]})
	}
	return rows, version, nil
}

// perRound returns the part of c that round makes, of rounds: the counts
// shared out so that the rounds add up to c's.
func perRound(c lockcycle.Config, rounds, round int) lockcycle.Config {
	part := func(n int) int {
		if round < n%rounds {
			return n/rounds + 1
		}
		return n / rounds
	}
	c.Cycles, c.MinCycles = part(c.Cycles), part(c.MinCycles)
	c.PerGoroutine, c.HandOvers = part(c.PerGoroutine), part(c.HandOvers)
	c.Budget /= time.Duration(rounds)
	return c
}

// slug returns name in lower case, each run of other characters than
// letters and digits one "-": a subject every coordinator takes.
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

// cycleRun is what the doc says of the run beside the table.
type cycleRun struct {
	command, commit  string
	versions         []string
	handOvers        string // the clients' own counts of hand-overs, if any
	config           lockcycle.Config
	rounds           int
	note             string
	loadStart        string  // the load averages at the start
	loadMin, loadMax float64 // the 1-minute load average's, read during the run
	took             time.Duration
	at               time.Time
}

func cycleDocBody(table string, r cycleRun) string {
	var b strings.Builder
	commit := ""
	if r.commit != "" {
		commit = " of commit `" + r.commit + "`"
	}
	fmt.Fprintf(&b, "One `%s`%s on %s, %s in all: %s, %d cores (%s), %s.\n", r.command, commit, r.at.UTC().Format("2 January 2006"),
		duration(r.took.Round(time.Second)), strings.Join(r.versions, ", "), runtime.NumCPU(), cpuModel(), runtime.Version())
	fmt.Fprintf(&b, "The 1-minute load average, read every 5 s, went from %.2f to %.2f on the %d cores, the run's own servers and clients included (1, 5 and 15 min at the start: %s).",
		r.loadMin, r.loadMax, runtime.NumCPU(), r.loadStart)
	if r.note != "" {
		b.WriteString(" " + r.note)
	}
	b.WriteString("\n\n")
	b.WriteString(table)
	c := r.config
	turns := ""
	if r.rounds > 1 {
		turns = fmt.Sprintf(", and take turns in %d rounds, each client a %s of its samples in each, so that a change in the machine's load falls on them alike", r.rounds, part(r.rounds))
	}
	fmt.Fprintf(&b, `
Every client locks through `+"`lease.Locker`"+` and is measured by one function,
[lockcycle.Measure](../internal/lockset/lockcycle/measure.go); the clients of a coordinator share one
server, a process of its own on the loopback interface%s. A cycle is Lock
of a free subject then Unlock, from Lock's call to Unlock's return, each on a new subject: from one
goroutine, up to %s cycles, fewer where %s did not allow them, at least %s; then %d goroutines of %d
cycles each, on subjects of their own. A hand-over, %d times on one subject%s: the holder holds it, a
second client of the same kind waits in Lock for %s plus a time at random up to %s, or up to its
longest period if it polls and that is longer, the holder calls Unlock; the figure is the
time from that call to the return of the waiter's Lock. A peer's lease is a signal that is never lost,
and its token the peer's own or 0. Each issuer is its NewLocker with its default Config; the servers are
those of the lock-set runs: Redis writes its append-only file through on each command (appendfsync
always), PostgreSQL runs with fsync off, MariaDB with innodb_flush_log_at_trx_commit 2, etcd with its
defaults, and Kubernetes as lockset-kube starts it, a kube-apiserver over an etcd of its own.
`, turns, lockcycle.Count(c.Cycles), duration(c.Budget), lockcycle.Count(c.MinCycles),
		c.Goroutines, c.PerGoroutine, c.HandOvers, r.handOvers, duration(c.Settle), duration(c.Settle/2))
	return b.String()
}

// part names one of n parts: "third" of 3.
func part(n int) string {
	switch n {
	case 2:
		return "half"
	case 3:
		return "third"
	case 4:
		return "quarter"
	case 5:
		return "fifth"
	}
	return fmt.Sprintf("1/%d", n)
}

// duration writes d in minutes and seconds from a minute, in seconds from
// one, in milliseconds below: "4 min 20 s", "6 s", "100 ms".
func duration(d time.Duration) string {
	if d >= time.Minute {
		if d%time.Minute == 0 {
			return fmt.Sprintf("%d min", d/time.Minute)
		}
		return fmt.Sprintf("%d min %s", d/time.Minute, duration(d%time.Minute))
	}
	if d >= time.Second {
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + " ms"
}

// loadAverage returns the first three fields of /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], ", ")
	}
	return "unknown"
}

// sampleLoad reads the 1-minute load average now and every period, until
// the returned function is called, which returns the least and the most
// read.
func sampleLoad(period time.Duration) func() (least, most float64) {
	read := func() (float64, bool) {
		b, err := os.ReadFile("/proc/loadavg")
		var v float64
		if err == nil {
			_, err = fmt.Sscan(string(b), &v)
		}
		return v, err == nil
	}
	least, most := math.Inf(1), math.Inf(-1)
	note := func() {
		if v, ok := read(); ok {
			least, most = min(least, v), max(most, v)
		}
	}
	note()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-stop:
				note()
				return
			case <-t.C:
				note()
			}
		}
	}()
	return func() (float64, float64) {
		close(stop)
		<-done
		if least > most {
			return 0, 0
		}
		return least, most
	}
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
