package check

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zukhruf/lease/internal/lockset/history"
)

// An op is an input of the mutex model: a process acquires the lock, or
// gives it up (a release, or a loss, which the model takes as a release).
type op struct {
	p       string
	acquire bool
	lost    bool
	token   int64
}

// free is the mutex model's state when no process holds the lock.
const free = ""

// mutexModel is a lock held by at most one process at a time: the state is
// the holder's name, or free.
var mutexModel = porcupine.Model{
	Init: func() any { return free },
	Step: func(state, input, _ any) (bool, any) {
		in := input.(op)
		holder := state.(string)
		if in.acquire {
			return holder == free, in.p
		}
		return holder == in.p, free
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(op)
		switch {
		case in.acquire:
			return fmt.Sprintf("acquire → token %d", in.token)
		case in.lost:
			return "lost"
		}
		return "release"
	},
	DescribeState: func(state any) string {
		if state.(string) == free {
			return "free"
		}
		return "held by " + state.(string)
	},
}

// linearize checks one lock's events against mutexModel. An acquire that
// succeeded runs from its invoke to its ok; a release from its invoke to
// its ok (or, with no ok, to the end of time: it may have taken effect at
// any later moment); a loss is an instant. An acquire that failed, or
// whose outcome is not known, gave the process nothing to act on and is
// left out.
func linearize(events []history.Event, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	clients := map[string]int{}
	client := func(p string) int {
		id, ok := clients[p]
		if !ok {
			id = len(clients)
			clients[p] = id
		}
		return id
	}
	var ops []porcupine.Operation
	invoked := map[string]int64{}
	releasing := map[string]int{} // a process's release not yet returned: its index in ops
	holding := map[string]bool{}
	for _, e := range events {
		switch {
		case e.F == history.Acquire && e.Type == history.Invoke:
			invoked[e.P] = e.T
		case e.F == history.Acquire && e.Type == history.OK:
			ops = append(ops, porcupine.Operation{ClientId: client(e.P), Input: op{p: e.P, acquire: true, token: e.Token}, Call: invoked[e.P], Return: e.T})
			holding[e.P] = true
		case e.F == history.Release && e.Type == history.Invoke && holding[e.P]:
			releasing[e.P] = len(ops)
			ops = append(ops, porcupine.Operation{ClientId: client(e.P), Input: op{p: e.P}, Call: e.T, Return: math.MaxInt64})
			holding[e.P] = false
		case e.F == history.Release && e.Type != history.Invoke:
			if i, ok := releasing[e.P]; ok {
				ops[i].Return = e.T
				delete(releasing, e.P)
			}
		case e.F == history.Lost && holding[e.P]:
			ops = append(ops, porcupine.Operation{ClientId: client(e.P), Input: op{p: e.P, lost: true}, Call: e.T, Return: e.T})
			holding[e.P] = false
		}
	}
	return porcupine.CheckOperationsVerbose(mutexModel, ops, timeout)
}

// annotations marks the fault windows, on a line of their own, and each
// write the register applied, on its writer's line.
func annotations(faults []Fault, writes []history.Event) []porcupine.Annotation {
	var as []porcupine.Annotation
	for _, f := range faults {
		as = append(as, porcupine.Annotation{Tag: "faults", Start: f.StartNS, End: f.EndNS, Description: strings.TrimSpace(f.Kind + " " + f.Target),
			Details: fmt.Sprintf("%s for %v", f.Kind, time.Duration(f.EndNS-f.StartNS)), BackgroundColor: "#f4c7c3"})
	}
	for _, w := range writes {
		verdict := "accepted"
		if w.Type == history.Fail {
			verdict = "refused"
		}
		as = append(as, porcupine.Annotation{Tag: "writes " + w.P, Start: w.T, End: w.T,
			Description: fmt.Sprintf("write %d", w.Token), Details: fmt.Sprintf("%s's write with token %d, %s by the fenced register", w.P, w.Token, verdict)})
	}
	return as
}
