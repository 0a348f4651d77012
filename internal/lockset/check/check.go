// Package check checks a lock-set history (package history): per lock, the
// holds of each process, from its acquire's ok to its loss or its release's
// invoke, against each other and against the writes the guarded register
// applied; and, with porcupine, the history against a mutex whose loss
// counts as a release.
package check

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zukhruf/lease/internal/lockset/history"
)

// Counts are what a history shows of one side (the issuer's processes, or
// the peer's). Their JSON form is fixed: summary.json and lockcheck's
// output carry it.
type Counts struct {
	// Overlaps is how many pairs of holds of one lock by two processes
	// intersect: the later acquire's ok came before the earlier holder's
	// loss or release.
	Overlaps int `json:"overlaps"`
	// UnsafeWrites is how many writes the unfenced register applied while
	// a process that took the lock after the writer's hold began held it.
	UnsafeWrites int `json:"unsafe_writes"`
	// StaleWritesAccepted is how many writes the fenced register accepted
	// with a token below one it accepted before.
	StaleWritesAccepted int `json:"stale_writes_accepted"`
	// FalseLosses is how many losses have no fault in their window.
	FalseLosses int `json:"false_losses"`
	// StoppedHolder is how many of the overlaps and unsafe writes came
	// with the earlier holder stopped (a pause-holder fault: SIGSTOP) at the
	// moment the later one was granted: an overlap whose holder sent no
	// write between its resumption and its loss, a write sent before the
	// resumption, or either with the loss within ResumeLoss of the
	// resumption. No lease can warn a stopped process, and one stopped
	// between its check and its write sends the write when it resumes:
	// only the fencing token protects the resource then. They are not
	// violations of the lease's promise; stale writes accepted would be. A
	// holder that resumes and writes, and is lost later than ResumeLoss
	// after, is not excused.
	StoppedHolder int `json:"stopped_holder"`
	// Raced is how many of the overlaps and unsafe writes came from an
	// erasure of the lock's keys (an operator's deletion; for Redis, a
	// restart without persistence) that freed the lock for a waiter in the
	// instant it told the holder: the later grant within RaceGrant of the
	// erasure, the earlier holder lost within RaceLoss of that grant. The
	// issuers document these as races that only the fencing token covers
	// (etcd's recipe, shared with concurrency.Mutex, frees a deleted key at
	// once; a Redis server restarted empty has forgotten every claim); they
	// are not counted as violations.
	Raced int `json:"raced"`
	// Clock is how many of the overlaps and unsafe writes came while the
	// server's wall clock ran faster than the issuer's margin allows (a
	// clock-rate fault above Options.ClockRate, within a TTL before the
	// later grant): the server expired the earlier holder's key early, and
	// only the fencing token protects the resource then (the issuer's
	// README states the rule).
	Clock int `json:"clock"`
	// InFlight is how many of the unsafe writes were sent while their
	// writer held the lock, and applied after its loss and after another
	// process's grant that came after that loss: the lease told its holder
	// before anyone else was granted, but the write had left. No lease can
	// recall a write sent; the fencing token refuses it.
	InFlight   int `json:"in_flight"`
	LossEvents int `json:"loss_events"`
	Handovers  int `json:"handovers"`
	Writes     int `json:"writes"`
	// Refused is how many of the writes the fenced register refused.
	Refused int `json:"refused,omitempty"`
	// The writes sent to the real store of a run with -register, through
	// its fence (history.Store): how many it answered, how many of them it
	// refused as stale, and how many it accepted with a token below one
	// of a write it had accepted before this one was sent (its answer
	// came before this one's send). Store writes whose answers overlap
	// are not ordered; a write whose outcome is not known raises no
	// threshold. A stale write accepted is a violation.
	StoreWrites              int `json:"store_writes,omitempty"`
	StoreRefused             int `json:"store_refused,omitempty"`
	StoreStaleWritesAccepted int `json:"store_stale_writes_accepted,omitempty"`
	// StoreAdvances is how many raises of the store's fence without a
	// write, right after a grant (a store event whose invoke's value is
	// "advance"), the store answered, and StoreAdvancesRefused how many
	// of them it refused. An advance accepted raises the threshold of
	// the writes sent after its answer.
	StoreAdvances        int `json:"store_advances,omitempty"`
	StoreAdvancesRefused int `json:"store_advances_refused,omitempty"`
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Overlaps += o.Overlaps
	c.UnsafeWrites += o.UnsafeWrites
	c.StaleWritesAccepted += o.StaleWritesAccepted
	c.FalseLosses += o.FalseLosses
	c.StoppedHolder += o.StoppedHolder
	c.Raced += o.Raced
	c.Clock += o.Clock
	c.InFlight += o.InFlight
	c.LossEvents += o.LossEvents
	c.Handovers += o.Handovers
	c.Writes += o.Writes
	c.Refused += o.Refused
	c.StoreWrites += o.StoreWrites
	c.StoreRefused += o.StoreRefused
	c.StoreStaleWritesAccepted += o.StoreStaleWritesAccepted
	c.StoreAdvances += o.StoreAdvances
	c.StoreAdvancesRefused += o.StoreAdvancesRefused
}

// Violations is the sum of the counts that must be zero: the overlaps and
// unsafe writes not explained by a stopped holder, an erasure's race, a
// server's clock beyond the margin or a write in flight at the loss, and
// the stale writes accepted, by the harness's register or by the real
// store.
func (c Counts) Violations() int {
	return c.Overlaps + c.UnsafeWrites - c.StoppedHolder - c.Raced - c.Clock - c.InFlight + c.StaleWritesAccepted + c.StoreStaleWritesAccepted
}

// A Fault is a window in which the harness made a fault, on the history's
// clock. Its JSON form is the one of summary.json's faults.
type Fault struct {
	Kind    string `json:"kind"`
	StartNS int64  `json:"start_ns"`
	EndNS   int64  `json:"end_ns"`
	// Target is the process a fault aimed at, if it aimed at one.
	Target string `json:"target,omitempty"`
	// Rate is, for a clock-rate fault, the rate the server's wall clock
	// ran at during it, as measured by reading it (zero if it could not
	// be), and RateError how far the true rate may be from that measure.
	Rate      float64 `json:"rate,omitempty"`
	RateError float64 `json:"rate_error,omitempty"`
}

// Options tune a check.
type Options struct {
	// LossWindow is how long after a fault ends a loss is still its
	// consequence: a loss with no fault between LossWindow before it and
	// itself is a false loss. Zero means 10 s.
	LossWindow time.Duration
	// Timeout bounds porcupine's search, per lock; zero means 30 s.
	Timeout time.Duration
	// HTMLDir, if set, is where Check writes porcupine's view of each lock
	// whose history has a violation or is not a mutex's, with the fault
	// windows marked: lockcheck-<lock>.html.
	HTMLDir string
	// SessionLocks says that a lock lives in its holder's session on the
	// server (PostgreSQL's advisory locks, MySQL's GET_LOCK): a reset of
	// the holder's connection (a CutHolder fault) ends the session, and
	// frees the lock, in the instant it tells the holder, a race of an
	// erasure as an operator's end of the session is. Elsewhere a reset
	// frees nothing, and a grant that follows it is no race.
	SessionLocks bool
	// ClockRate is the fastest rate of the server's wall clock that the
	// issuer's deadline allows for (1 + margin/TTL); TTL is how long the
	// keys live. Overlaps and unsafe writes with a clock-rate fault faster
	// than ClockRate within TTL before the later grant are counted in
	// Counts.Clock. Zero: none are.
	ClockRate float64
	TTL       time.Duration
}

// A Finding is one violation, described for a person.
type Finding struct {
	Lock string
	Kind string // "overlap", "unsafe write", "stale write accepted", "stale write accepted by the store", "not linearizable"
	Text string
}

// Result is a history's verdict.
type Result struct {
	// Sides maps a side, the part of a process's name before its first
	// "-" ("lease-3" is of side lease), to its counts.
	Sides    map[string]Counts
	Findings []Finding
	// Linearizable maps each lock to porcupine's verdict on it: ok,
	// illegal, or unknown when the search ran out of time.
	Linearizable map[string]porcupine.CheckResult
	// Excused lists the locks porcupine finds illegal only because of
	// overlaps excused: with a stopped holder, an erasure's race, or a
	// server's clock beyond the margin (see Counts).
	Excused map[string]bool
	HTML    []string // the views written
}

// Side returns the side of process p.
func Side(p string) string {
	side, _, _ := strings.Cut(p, "-")
	return side
}

// A hold is one process's holding of one lock.
type hold struct {
	p          string
	token      int64
	invoke     int64 // its acquire's invoke
	start, end int64 // acquire ok; loss or release invoke (MaxInt64 if neither)
}

// Check checks events, sorted by time as history.Read returns them, made
// under faults.
func Check(events []history.Event, faults []Fault, o Options) (Result, error) {
	if o.LossWindow == 0 {
		o.LossWindow = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	res := Result{Sides: map[string]Counts{}, Linearizable: map[string]porcupine.CheckResult{}, Excused: map[string]bool{}}
	byLock := map[string][]history.Event{}
	var locks []string
	for _, e := range events {
		if _, ok := byLock[e.Lock]; !ok {
			locks = append(locks, e.Lock)
		}
		byLock[e.Lock] = append(byLock[e.Lock], e)
		if _, ok := res.Sides[Side(e.P)]; !ok {
			res.Sides[Side(e.P)] = Counts{}
		}
	}
	sort.Strings(locks)
	for _, lock := range locks {
		if err := checkLock(lock, byLock[lock], faults, o, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

func checkLock(lock string, events []history.Event, faults []Fault, o Options, res *Result) error {
	add := func(p string, f func(*Counts)) {
		c := res.Sides[Side(p)]
		f(&c)
		res.Sides[Side(p)] = c
	}
	var holds []*hold
	open := map[string]*hold{}    // a process's hold not ended yet
	invoked := map[string]int64{} // a process's last acquire invoke
	var writes []history.Event    // writes as the register applied them
	var sent []history.Event      // writes as their processes sent them
	maxAccepted := int64(math.MinInt64)
	// The real store's writes: the highest token of a write it accepted
	// whose answer has come, and, for each process's write in flight,
	// what that was when it was sent.
	storeAccepted := int64(math.MinInt64)
	type storeCall struct {
		before  int64 // storeAccepted at the send
		advance bool
	}
	storeSent := map[string]storeCall{}
	var last *hold // the last hold to begin
	for _, e := range events {
		switch {
		case e.F == history.Acquire && e.Type == history.Invoke:
			invoked[e.P] = e.T
		case e.F == history.Acquire && e.Type == history.OK:
			if h := open[e.P]; h != nil {
				return fmt.Errorf("lock %s: %s's acquire ok at %d while it holds the lock since %d", lock, e.P, e.T, h.start)
			}
			h := &hold{p: e.P, token: e.Token, invoke: invoked[e.P], start: e.T, end: math.MaxInt64}
			if last != nil && last.p != e.P {
				add(e.P, func(c *Counts) { c.Handovers++ })
			}
			holds = append(holds, h)
			open[e.P], last = h, h
		case e.F == history.Lost:
			if h := open[e.P]; h != nil {
				h.end = e.T
				delete(open, e.P)
				add(e.P, func(c *Counts) { c.LossEvents++ })
				if !faultNear(faults, e.T, o.LossWindow) {
					add(e.P, func(c *Counts) { c.FalseLosses++ })
				}
			}
		case e.F == history.Release && e.Type == history.Invoke:
			if h := open[e.P]; h != nil {
				h.end = e.T
				delete(open, e.P)
			}
		case e.F == history.Write && e.Type == history.Invoke:
			sent = append(sent, e)
		case e.F == history.Write && (e.Type == history.OK || e.Type == history.Fail):
			writes = append(writes, e)
			add(e.P, func(c *Counts) { c.Writes++ })
			if e.Type == history.Fail {
				add(e.P, func(c *Counts) { c.Refused++ })
			}
			if e.Type == history.OK {
				if e.Token < maxAccepted {
					add(e.P, func(c *Counts) { c.StaleWritesAccepted++ })
					res.Findings = append(res.Findings, Finding{lock, "stale write accepted",
						fmt.Sprintf("%s's write at %d with token %d accepted after one with token %d", e.P, e.T, e.Token, maxAccepted)})
				}
				maxAccepted = max(maxAccepted, e.Token)
			}
		case e.F == history.Store && e.Type == history.Invoke:
			storeSent[e.P] = storeCall{before: storeAccepted, advance: e.Value == StoreAdvance}
		case e.F == history.Store:
			call, ok := storeSent[e.P]
			if !ok {
				return fmt.Errorf("lock %s: %s's store call answered at %d was not sent", lock, e.P, e.T)
			}
			delete(storeSent, e.P)
			if e.Type == history.Info {
				break
			}
			switch {
			case call.advance && e.Type == history.Fail:
				add(e.P, func(c *Counts) { c.StoreAdvances++; c.StoreAdvancesRefused++ })
			case call.advance:
				add(e.P, func(c *Counts) { c.StoreAdvances++ })
			case e.Type == history.Fail:
				add(e.P, func(c *Counts) { c.StoreWrites++; c.StoreRefused++ })
			default:
				add(e.P, func(c *Counts) { c.StoreWrites++ })
				if e.Token < call.before {
					add(e.P, func(c *Counts) { c.StoreStaleWritesAccepted++ })
					res.Findings = append(res.Findings, Finding{lock, "stale write accepted by the store",
						fmt.Sprintf("%s's store write answered at %d with token %d accepted, sent after the store had accepted token %d", e.P, e.T, e.Token, call.before)})
				}
			}
			if e.Type == history.Fail {
				break
			}
			storeAccepted = max(storeAccepted, e.Token)
		}
	}

	// Overlaps: holds in the order they began; each against the earlier
	// ones of other processes still held when it began.
	overlaps, excused := 0, 0
	for i, b := range holds {
		for _, a := range holds[:i] {
			if a.p != b.p && a.end > b.start {
				add(b.p, func(c *Counts) { c.Overlaps++ })
				overlaps++
				kind := "overlap"
				// Excused: a was stopped when b was granted, and sent no
				// write between its resumption and its loss or release, or
				// lost the lock within ResumeLoss of its resumption.
				if f := pauseAt(faults, a.p, b.start); f != nil && (!sentBetween(sent, a.p, f.EndNS, a.end) || a.end-f.EndNS <= int64(ResumeLoss)) {
					excused++
					add(b.p, func(c *Counts) { c.StoppedHolder++ })
					kind = "overlap, the holder stopped"
				} else if deletionRace(faults, lock, a.p, o.SessionLocks, b.start, a.end) {
					excused++
					add(b.p, func(c *Counts) { c.Raced++ })
					kind = "overlap, an erasure's race"
				} else if fastClock(faults, o, b.start) {
					excused++
					add(b.p, func(c *Counts) { c.Clock++ })
					kind = "overlap, the server's clock beyond the margin"
				}
				res.Findings = append(res.Findings, Finding{lock, kind,
					fmt.Sprintf("%s acquired at %d (token %d) while %s held it since %d (token %d), %s", b.p, b.start, b.token, a.p, a.start, a.token, endText(a, b))})
			}
		}
	}

	// Unsafe writes: a write applied while a process that took the lock
	// after the writer's hold began held it.
	for _, w := range writes {
		mine := holdAt(holds, w.P, w.T)
		if mine == nil {
			continue // a write with no hold of its writer: counted nowhere
		}
		for _, h := range holds {
			if h.p != w.P && h.start > mine.start && h.start < w.T && w.T < h.end {
				add(w.P, func(c *Counts) { c.UnsafeWrites++ })
				kind := "unsafe write"
				// Excused: the writer was stopped when h was granted, and
				// had sent the write before it resumed, or lost the lock
				// within ResumeLoss of its resumption.
				if f := pauseAt(faults, w.P, h.start); f != nil && (lastSent(sent, w.P, w.T) < f.EndNS || mine.end-f.EndNS <= int64(ResumeLoss)) {
					add(w.P, func(c *Counts) { c.StoppedHolder++ })
					kind = "unsafe write, the writer stopped"
				} else if deletionRace(faults, lock, w.P, o.SessionLocks, h.start, mine.end) && w.T <= mine.end {
					add(w.P, func(c *Counts) { c.Raced++ })
					kind = "unsafe write, an erasure's race"
				} else if fastClock(faults, o, h.start) {
					add(w.P, func(c *Counts) { c.Clock++ })
					kind = "unsafe write, the server's clock beyond the margin"
				} else if mine.end <= h.start && lastSent(sent, w.P, w.T) < mine.end {
					// Sent before the writer's loss, which came before
					// the grant.
					add(w.P, func(c *Counts) { c.InFlight++ })
					kind = "unsafe write, in flight at the writer's loss"
				}
				res.Findings = append(res.Findings, Finding{lock, kind,
					fmt.Sprintf("%s's write with token %d applied at %d, while %s held the lock since %d (token %d)", w.P, w.Token, w.T, h.p, h.start, h.token)})
				break
			}
		}
	}

	verdict, info := linearize(events, o.Timeout)
	res.Linearizable[lock] = verdict
	res.Excused[lock] = verdict == porcupine.Illegal && overlaps > 0 && overlaps == excused
	if verdict == porcupine.Illegal {
		res.Findings = append(res.Findings, Finding{lock, "not linearizable", "porcupine finds no order of the acquires and releases that a mutex allows"})
	}
	violated := verdict == porcupine.Illegal
	for _, f := range res.Findings {
		violated = violated || f.Lock == lock
	}
	if violated && o.HTMLDir != "" {
		path := filepath.Join(o.HTMLDir, "lockcheck-"+fileName(lock)+".html")
		info.AddAnnotations(annotations(faults, writes))
		if err := porcupine.VisualizePath(mutexModel, info, path); err != nil {
			return fmt.Errorf("lock %s: write %s: %w", lock, path, err)
		}
		res.HTML = append(res.HTML, path)
	}
	return nil
}

// holdAt returns p's hold that began last at or before t.
func holdAt(holds []*hold, p string, t int64) *hold {
	var found *hold
	for _, h := range holds {
		if h.p == p && h.start <= t {
			found = h
		}
	}
	return found
}

func endText(a, b *hold) string {
	if a.end == math.MaxInt64 {
		return "which it never lost nor released"
	}
	return fmt.Sprintf("which it lost or released %v later", time.Duration(a.end-b.start))
}

// StoreAdvance is the value of the invoke of a store event that raises the
// store's fence without a write (history.Store).
const StoreAdvance = "advance"

// PauseHolder is the kind of the fault that stops a holder's process.
const PauseHolder = "pause-holder"

// ResumeLoss bounds the time from a stopped holder's resumption to its
// loss within which what it did is the stop's (see Counts.StoppedHolder):
// once resumed, the runtime runs the process's goroutines in any order, and
// a check of the signal can come before the timer that loses the lease,
// overdue since the stop.
const ResumeLoss = 100 * time.Millisecond

// The bounds of an erasure's race (see Counts.Raced). Within RaceLoss of
// the waiter's grant, the holder learned of the erasure by the same news
// as the waiter (a push, a watch event, the reset of its connection), not
// from its own deadline, which comes a TTL less the margin after its last
// renewal: 1.8 s for the runs' 2 s TTL. The news reaches two processes in
// either order, and on a loaded machine tens of milliseconds apart (a
// Kubernetes holder's watch told it 72 ms after a waiter had taken the
// deleted Lease, at a load average of 15 on 2 cores).
const (
	RaceGrant = time.Second
	RaceLoss  = 250 * time.Millisecond
)

// DeleteLockKeys is the kind of the fault that deletes a lock's keys; its
// target is the lock, and its window the deletion's call, from its send to
// its reply.
const DeleteLockKeys = "delete-lock-keys"

// TerminateSession is the kind of the fault that ends the server's session
// holding a lock (PostgreSQL's pg_terminate_backend, MySQL's KILL); its
// target is the lock, and its window the call's. Like a deletion, it
// erases the lock on the server.
const TerminateSession = "terminate-session"

// CutHolder is the kind of the fault that resets every connection of a
// holder at its proxy; its target is the process.
const CutHolder = "cut-holder"

// KillServerWipe is the kind of the fault that kills the server and
// restarts it without its data when the fault ends, erasing every key.
const KillServerWipe = "kill-server-wipe"

// deletionRace reports whether a grant at grant, and the earlier holder's
// loss at loss, are a race of an erasure of lock's keys: an operator's
// deletion of them or end of the session holding it (within its call), a
// reset of holder's connection where locks live in sessions (at its
// start), or a restart of the server without its data (at its end).
func deletionRace(faults []Fault, lock, holder string, sessionLocks bool, grant, loss int64) bool {
	for _, f := range faults {
		from, to := int64(-1), int64(-1) // when the erasure may have taken effect
		switch {
		case (f.Kind == DeleteLockKeys || f.Kind == TerminateSession) && f.Target == lock:
			// The window is the call's, from its send to its reply.
			from, to = f.StartNS, f.EndNS
		case sessionLocks && f.Kind == CutHolder && f.Target == holder:
			from, to = f.StartNS, f.StartNS
		case f.Kind == KillServerWipe:
			from, to = f.EndNS, f.EndNS
		}
		if from >= 0 && from <= grant && grant-to <= int64(RaceGrant) && loss-grant <= int64(RaceLoss) {
			return true
		}
	}
	return false
}

// ClockRate is the kind of the fault that runs the server's wall clock at
// another rate; its Rate is the rate measured.
const ClockRate = "clock-rate"

// fastClock reports whether a grant at grant came within o.TTL of a
// clock-rate fault faster than o.ClockRate, with its measure's
// uncertainty: a key written in that time may have expired early by the
// server's clock.
func fastClock(faults []Fault, o Options, grant int64) bool {
	if o.ClockRate <= 0 {
		return false
	}
	for _, f := range faults {
		if f.Kind == ClockRate && f.Rate-f.RateError > o.ClockRate && f.StartNS <= grant && grant-f.EndNS <= int64(o.TTL) {
			return true
		}
	}
	return false
}

// pauseAt returns the pause-holder fault that stopped process p at t, or
// had resumed it within ResumeLoss before t, or nil: a resumed process runs
// its goroutines in any order, and the lease's overdue deadline can end
// the holder's session, and free the lock for a waiter, before the
// goroutine that records the loss has run.
func pauseAt(faults []Fault, p string, t int64) *Fault {
	for i, f := range faults {
		if f.Kind == PauseHolder && f.Target == p && f.StartNS <= t && t <= f.EndNS+int64(ResumeLoss) {
			return &faults[i]
		}
	}
	return nil
}

// sentBetween reports whether p sent a write in (from, to).
func sentBetween(sent []history.Event, p string, from, to int64) bool {
	for _, e := range sent {
		if e.P == p && e.T > from && e.T < to {
			return true
		}
	}
	return false
}

// lastSent returns the time of p's last write sent before t.
func lastSent(sent []history.Event, p string, t int64) int64 {
	last := int64(math.MinInt64)
	for _, e := range sent {
		if e.P == p && e.T < t {
			last = e.T
		}
	}
	return last
}

// faultNear reports whether a fault window intersects [t-window, t].
func faultNear(faults []Fault, t int64, window time.Duration) bool {
	for _, f := range faults {
		if f.StartNS <= t && f.EndNS >= t-int64(window) {
			return true
		}
	}
	return false
}

func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
