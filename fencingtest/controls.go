package fencingtest

import (
	"context"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/zukhruf/lease/fencing"
)

// The negative controls: fences built wrong over the store's own client,
// each of which the suite must fail in the checks named.
var controls = map[string]struct {
	wrap  func(Store) Store
	fails []string // subtests of Run that must fail
}{
	// RacingWriters fails them too in most runs, not in every one: a race
	// of 32 writers may miss the interleaving that the flaw needs, which
	// the paused holder and the delayed request force.
	// The fence is raised in one call and the value written in another,
	// as a holder that checks a token and then writes does.
	"CheckThenWrite": {
		wrap:  func(s Store) Store { return checkThenWrite{s} },
		fails: []string{"PausedHolder", "DelayedRequest"},
	},
	// The token stored with the value is read and compared by the client,
	// then the value written unconditionally, as a PUT without If-Match.
	"ReadThenPut": {
		wrap:  func(s Store) Store { return readThenPut{s} },
		fails: []string{"PausedHolder", "DelayedRequest"},
	},
}

// RunNegativeControls runs [Run] on each negative control built over h's
// store, each in a child process (the test binary, run again on the test
// that called RunNegativeControls), and fails t unless each control fails
// the checks that its flaw breaks:
//
//   - CheckThenWrite: Advance, then a Put of the value in a second call.
//   - ReadThenPut: a Get of the stored token, a compare in the client,
//     then a Put.
//
// The test that calls it should call nothing else, and its TestMain should
// not start a store in a child process ([Child]).
func RunNegativeControls(t *testing.T, h Harness) {
	t.Helper()
	if name := os.Getenv(envControl); name != "" {
		c, ok := controls[name]
		if !ok {
			t.Fatalf("fencingtest: no negative control %q", name)
		}
		open := h.Open
		h.Open = func(t *testing.T, addr string) Store { return c.wrap(open(t, addr)) }
		Run(t, h)
		return
	}
	if h.Addr == "" || h.Open == nil {
		panic("fencingtest: RunNegativeControls called with a Harness without Addr or Open")
	}
	names := make([]string, 0, len(controls))
	for name := range controls {
		names = append(names, name)
	}
	sort.Strings(names)
	test := t.Name()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run="+testPattern(test), "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envAddr+"="+h.Addr, envControl+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a fence built wrong (%s):\n%s", name, out)
			}
			for _, check := range controls[name].fails {
				if !strings.Contains(string(out), "--- FAIL: "+test+"/"+check+" ") {
					t.Errorf("the suite did not fail %s on a fence built wrong (%s):\n%s", check, name, out)
				}
			}
		})
	}
}

type checkThenWrite struct{ Store }

func (checkThenWrite) splitWrite() {}

func (s checkThenWrite) Write(ctx context.Context, resource string, token int64, value string) error {
	if err := s.Advance(ctx, resource, token); err != nil {
		return err
	}
	pause(ctx)
	return s.Put(ctx, resource, value, token)
}

type readThenPut struct{ Store }

func (readThenPut) splitWrite() {}

func (s readThenPut) Write(ctx context.Context, resource string, token int64, value string) error {
	_, current, err := s.Get(ctx, resource)
	if err != nil {
		return err
	}
	if token < current {
		return &fencing.StaleError{Resource: resource, Token: token, Current: current}
	}
	pause(ctx)
	return s.Put(ctx, resource, value, token)
}

// Advance of readThenPut compares the stored token too, and writes
// nothing: the fence that such a store has.
func (s readThenPut) Advance(ctx context.Context, resource string, token int64) error {
	_, current, err := s.Get(ctx, resource)
	if err != nil {
		return err
	}
	if token < current {
		return &fencing.StaleError{Resource: resource, Token: token, Current: current}
	}
	return nil
}
