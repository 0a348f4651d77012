package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zukhruf/lease/internal/lockset/check"
)

// The markers between which allMain writes its table into the document.
const (
	tableBegin = "<!-- lockset-all table: written by make lockset-all -->"
	tableEnd   = "<!-- end of the lockset-all table -->"
)

// allMain is "lockset all": for each issuer, seeds runs of seconds each,
// seed n with the fault mix n-1 modulo the mixes (all, network, server,
// process, operator), and the table of them written into a document.
func allMain(args []string) error {
	var c runConfig
	fs := flag.NewFlagSet("all", flag.ExitOnError)
	c.flags(fs)
	seeds := fs.Int("seeds", 10, "runs per issuer, seeds 1 to seeds, the fault mixes in turn")
	mixList := fs.String("mixes", "", "the fault mixes, separated by commas (default: every mix of each issuer; an issuer without the mixes named makes no run)")
	list := fs.String("issuers", strings.Join(issuers, ","), "the issuers, separated by commas")
	doc := fs.String("doc", "", "a document to write the table into, between its markers")
	parallel := fs.Bool("parallel", false, "run the issuers at once, each its runs in turn")
	again := fs.Bool("again", false, "run nothing: check again every run in -out of the issuers and mixes named, made by earlier lockset all or run, and write their table")
	fs.Parse(args)
	root := c.dir
	if *again && root == "" {
		return errors.New("all: -again needs -out, the folder of the runs")
	}
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("", "lockset-all-"); err != nil {
			return err
		}
	}
	type row struct {
		issuer, mix   string
		runs, seconds int
		lease, peer   check.Counts
		illegal       int // lease locks porcupine finds illegal, not excused
	}
	var rows []*row
	find := func(issuer, mix string) *row {
		for _, r := range rows {
			if r.issuer == issuer && r.mix == mix {
				return r
			}
		}
		r := &row{issuer: issuer, mix: mix}
		rows = append(rows, r)
		return r
	}
	started := time.Now()
	violations := 0
	var (
		mu sync.Mutex // guards rows, violations and the output of a run's report
		wg sync.WaitGroup
	)
	names := strings.Split(*list, ",")
	var failed error
	// one runs (or, with -again, checks again) the run of rc in its folder,
	// and reports whether it could.
	one := func(rc runConfig) bool {
		var (
			res check.Result
			sum summary
			err error
		)
		if *again {
			res, sum, err = checkAgain(rc.dir)
			rc.seconds, rc.mix, rc.seed = sum.Seconds, sum.Mix, sum.Seed
		} else {
			res, sum, err = run(rc)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = errors.Join(failed, fmt.Errorf("%s seed %d: %w", rc.issuer, rc.seed, err))
			return false
		}
		fmt.Printf("lockset: %s %s seed %d:\n", rc.issuer, rc.mix, rc.seed)
		if err := report(res, "lease"); err != nil {
			violations++
		}
		r := find(rc.issuer, rc.mix)
		r.runs++
		r.seconds += rc.seconds
		r.lease.Add(sum.Lease)
		r.peer.Add(sum.Peer)
		for lock, v := range res.Linearizable {
			if check.Side(lock) == "lease" && v == "Illegal" && !res.Excused[lock] {
				r.illegal++
			}
		}
		return true
	}
	runIssuer := func(issuer string) {
		ms := mixesOf(issuer)
		if *mixList != "" {
			ms = slices.DeleteFunc(strings.Split(*mixList, ","), func(m string) bool { return !slices.Contains(ms, m) })
		}
		if len(ms) == 0 {
			return
		}
		if *again {
			// Every run of the issuer in the folder, whatever its seed.
			dirs, _ := filepath.Glob(filepath.Join(root, issuer+"-*-seed*"))
			for _, dir := range dirs {
				for _, m := range ms {
					if strings.HasPrefix(filepath.Base(dir), issuer+"-"+m+"-seed") {
						rc := c
						rc.issuer, rc.dir = issuer, dir
						one(rc)
					}
				}
			}
			return
		}
		for seed := 1; seed <= *seeds; seed++ {
			rc := c
			rc.issuer, rc.seed, rc.mix = issuer, int64(seed), ms[(seed-1)%len(ms)]
			rc.dir = filepath.Join(root, fmt.Sprintf("%s-%s-seed%d", issuer, rc.mix, seed))
			if !one(rc) {
				return
			}
		}
	}
	for _, issuer := range names {
		if !*parallel {
			runIssuer(issuer)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runIssuer(issuer)
		}()
	}
	wg.Wait()
	if failed != nil {
		return failed
	}
	// By issuer, as the list names them, then by mix, as mixes lists them.
	slices.SortStableFunc(rows, func(a, b *row) int {
		if c := cmp.Compare(slices.Index(names, a.issuer), slices.Index(names, b.issuer)); c != 0 {
			return c
		}
		return cmp.Compare(slices.Index(mixesOf(a.issuer), a.mix), slices.Index(mixesOf(b.issuer), b.mix))
	})
	var t bytes.Buffer
	fmt.Fprintf(&t, "%s\n\n", tableBegin)
	how := "the issuers one after another"
	if *parallel {
		how = "the issuers at once"
	}
	took := fmt.Sprintf("%v in all", time.Since(started).Round(time.Minute))
	if *again {
		took = "checked again (`lockset all -again`: every run in the folder)"
	}
	fmt.Fprintf(&t, "`make lockset-all SECONDS=%d SEEDS=%d LOCKS=%d PARALLEL=%v`, %s, %d contenders on each of %d locks a side, TTL %v, %s; %s.\n",
		c.seconds, *seeds, c.locks, *parallel, time.Now().UTC().Format("2006-01-02"), c.perLock, c.locks, c.ttl, how, took)
	fmt.Fprintf(&t, "Each cell is the issuer's lease, then the peer library beside it (etcd: `concurrency.Mutex`; Redis: redsync's `Mutex`; PostgreSQL: `pg_advisory_lock` on a connection of its own; MySQL: `GET_LOCK` on a connection of its own; Kubernetes: client-go's `LeaderElector`; NATS: a KV `Create`, then `Update` at the last revision every third of the TTL, by hand; S3: the lockfile of Terraform's S3 backend, a `PutObject` with If-None-Match: * to take and a `DeleteObject` to release, never renewed). Excused: the overlaps and unsafe writes of a holder stopped by SIGSTOP (or resumed within 100 ms); of an erasure that freed the lock in the instant it told the holder: an operator's deletion of the lock or end of its session, a Redis restart without data, a reset of the holder's connection where the lock lives in its session; of a Redis server's clock beyond the margin; and the writes sent before their writer's loss, which came before the other's grant (in flight; docs/lockset.md). The last column counts the lease's locks that porcupine finds not a mutex's, other than so.\n\n")
	fmt.Fprintf(&t, "| issuer | faults | runs | minutes | loss events | hand-overs | writes | overlaps | unsafe writes | excused: stopped holder, erasure race, fast clock, in flight | stale writes accepted | false losses | not a mutex |\n")
	fmt.Fprintf(&t, "|---|---|---:|---:|---|---|---|---|---|---|---|---|---:|\n")
	pair := func(a, b int) string { return fmt.Sprintf("%d · %d", a, b) }
	for _, r := range rows {
		fmt.Fprintf(&t, "| %s | %s | %d | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			r.issuer, r.mix, r.runs, float64(r.seconds)/60,
			pair(r.lease.LossEvents, r.peer.LossEvents), pair(r.lease.Handovers, r.peer.Handovers), pair(r.lease.Writes, r.peer.Writes),
			pair(r.lease.Overlaps, r.peer.Overlaps), pair(r.lease.UnsafeWrites, r.peer.UnsafeWrites), fmt.Sprintf("%d, %d, %d, %d · %d, %d, %d, %d", r.lease.StoppedHolder, r.lease.Raced, r.lease.Clock, r.lease.InFlight, r.peer.StoppedHolder, r.peer.Raced, r.peer.Clock, r.peer.InFlight),
			pair(r.lease.StaleWritesAccepted, r.peer.StaleWritesAccepted), pair(r.lease.FalseLosses, r.peer.FalseLosses), r.illegal)
	}
	fmt.Fprintf(&t, "\n%s", tableEnd)
	fmt.Println(t.String())
	fmt.Printf("lockset: the runs are in %s\n", root)
	if *doc != "" {
		if err := writeTable(*doc, t.String()); err != nil {
			return err
		}
	}
	if violations > 0 {
		fmt.Fprintf(os.Stderr, "lockset: %d runs with violations of the lease\n", violations)
		return errViolation
	}
	return nil
}

// writeTable puts table in place of the text between the markers of doc.
func writeTable(doc, table string) error {
	b, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	i, j := bytes.Index(b, []byte(tableBegin)), bytes.Index(b, []byte(tableEnd))
	if i < 0 || j < i {
		return errors.New(doc + ": no lockset-all table markers")
	}
	out := append(append(append([]byte{}, b[:i]...), table...), b[j+len(tableEnd):]...)
	return os.WriteFile(doc, out, 0o644)
}

// checkAgain checks the run in dir again, with its summary's faults, and
// writes the summary's counts anew.
func checkAgain(dir string) (check.Result, summary, error) {
	var sum summary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return check.Result{}, sum, err
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return check.Result{}, sum, fmt.Errorf("%s: %w", dir, err)
	}
	res, err := checkFile(filepath.Join(dir, "history.jsonl"), sum.Faults, checkOptions(sum.Issuer, time.Duration(sum.LossWindowNS), sum.ttl()))
	if err != nil {
		return res, sum, err
	}
	sum.Lease, sum.Peer = res.Sides["lease"], res.Sides["peer"]
	b, _ = json.MarshalIndent(sum, "", "  ")
	return res, sum, os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644)
}
