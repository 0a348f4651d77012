package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zukhruf/lease/internal/lockset/check"
	"github.com/zukhruf/lease/internal/lockset/history"
)

// errViolation is the error of a history with a violation: lockset exits 1.
var errViolation = errors.New("the history has violations")

// A summary is summary.json, whose shape is fixed: other tools read it.
// Mix (the fault mix), Register (the real store of -register) and
// LossWindowNS (how long after a fault a loss is still its consequence,
// for a later check of the history) are additions.
type summary struct {
	Issuer       string        `json:"issuer"`
	Mix          string        `json:"mix,omitempty"`
	Seed         int64         `json:"seed"`
	Seconds      int           `json:"seconds"`
	Register     string        `json:"register,omitempty"`
	Faults       []check.Fault `json:"faults"`
	Lease        check.Counts  `json:"lease"`
	Peer         check.Counts  `json:"peer"`
	LossWindowNS int64         `json:"loss_window_ns,omitempty"`
	TTLNS        int64         `json:"ttl_ns,omitempty"`
}

// ttl returns the leases' TTL of the run: a run before summaries carried
// it had a loss window of 4 TTLs.
func (s summary) ttl() time.Duration {
	if s.TTLNS > 0 {
		return time.Duration(s.TTLNS)
	}
	return time.Duration(s.LossWindowNS / 4)
}

func checkMain(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	path := fs.String("history", "", "the history to check, a JSONL file; the faults are read from summary.json beside it, if there is one")
	window := fs.Duration("loss-window", 0, "how long after a fault a loss is still its consequence (default: summary.json's, or 10s)")
	fs.Parse(args)
	if *path == "" {
		return errors.New("check: -history is required")
	}
	var sum summary
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(*path), "summary.json")); err == nil {
		if err := json.Unmarshal(b, &sum); err != nil {
			return fmt.Errorf("check: summary.json: %w", err)
		}
	}
	if *window == 0 {
		*window = time.Duration(sum.LossWindowNS)
	}
	res, err := checkFile(*path, sum.Faults, checkOptions(sum.Issuer, *window, sum.ttl()))
	if err != nil {
		return err
	}
	return report(res)
}

// checkFile checks the history at path, and writes the views of the locks
// with a violation beside it.
func checkFile(path string, faults []check.Fault, o check.Options) (check.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return check.Result{}, err
	}
	defer f.Close()
	events, err := history.Read(f)
	if err != nil {
		return check.Result{}, err
	}
	o.HTMLDir = filepath.Dir(path)
	return check.Check(events, faults, o)
}

// checkOptions returns the options of a check of issuer's history, with
// the loss window and the leases' TTL of its run.
func checkOptions(issuer string, window, ttl time.Duration) check.Options {
	o := check.Options{
		LossWindow: window,
		// The locks live in the holder's session on the server, which a
		// reset of its connection ends.
		SessionLocks: issuer == "pg" || issuer == "mysql",
		TTL:          ttl,
	}
	if issuer == "redis" {
		// redislease's default margin, which the runs' leases keep, is a
		// tenth of the TTL: its deadline allows for a server's clock
		// running up to 1.1 times as fast as this machine's.
		o.ClockRate = 1.1
	}
	return o
}

// report prints each side's counts as JSON, one line a side, then the
// findings, and returns errViolation if a side of strict (every side, if
// none is named) has a violation or a lock of it is not a mutex's.
func report(res check.Result, strict ...string) error {
	sides := make([]string, 0, len(res.Sides))
	for s := range res.Sides {
		sides = append(sides, s)
	}
	sort.Strings(sides)
	counts := func(side string) bool { return len(strict) == 0 || slices.Contains(strict, side) }
	bad := false
	for _, s := range sides {
		b, _ := json.Marshal(res.Sides[s])
		fmt.Printf("%s %s\n", s, b)
		bad = bad || counts(s) && res.Sides[s].Violations() > 0
	}
	for _, f := range res.Findings {
		fmt.Printf("  %s: %s: %s\n", f.Lock, f.Kind, f.Text)
	}
	locks := make([]string, 0, len(res.Linearizable))
	for lock := range res.Linearizable {
		locks = append(locks, lock)
	}
	sort.Strings(locks)
	for _, lock := range locks {
		v := res.Linearizable[lock]
		bad = bad || counts(check.Side(lock)) && v == porcupine.Illegal && !res.Excused[lock]
		switch {
		case res.Excused[lock]:
			fmt.Printf("  %s: porcupine: %s, only by overlaps excused (a stopped holder, an erasure's race, a fast clock)\n", lock, v)
		case v != porcupine.Ok:
			fmt.Printf("  %s: porcupine: %s\n", lock, v)
		}
	}
	for _, p := range res.HTML {
		fmt.Printf("  view: %s\n", p)
	}
	if bad {
		return errViolation
	}
	return nil
}
