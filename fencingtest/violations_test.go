package fencingtest

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// op is one operation of a hand-made history: a write (value != "" and
// token != 0) or a read, over [call, ret].
func op(client int, call, ret int64, write bool, token int64, value string, ok bool) porcupine.Operation {
	in := regInput{write: write, token: token}
	out := regOutput{ok: ok}
	if write {
		in.value = value
	} else {
		out.value = value
	}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

// The interval rules pass the histories a fenced register allows and
// catch each kind of violation, as porcupine does.
func TestViolations(t *testing.T) {
	for _, c := range []struct {
		name    string
		history []porcupine.Operation
		bad     bool
	}{
		{"in order", []porcupine.Operation{
			op(0, 0, 1, true, 5, "a", true),
			op(1, 2, 3, true, 4, "b", false),
			op(1, 4, 5, false, 0, "a", false),
		}, false},
		{"equal tokens, overlapping", []porcupine.Operation{
			op(0, 0, 3, true, 5, "a", true),
			op(1, 1, 2, true, 5, "b", true),
			op(2, 4, 5, false, 0, "a", false),
		}, false},
		{"a stale write accepted after a higher one returned", []porcupine.Operation{
			op(0, 0, 1, true, 7, "a", true),
			op(1, 2, 3, true, 5, "b", true),
		}, true},
		{"a lost update: the lower write's value read after the higher returned", []porcupine.Operation{
			op(0, 0, 5, true, 5, "a", true),
			op(1, 1, 2, true, 7, "b", true),
			op(1, 6, 7, false, 0, "a", false),
		}, true},
		{"a refusal with no higher write", []porcupine.Operation{
			op(0, 0, 1, true, 5, "a", true),
			op(1, 2, 3, true, 6, "b", false),
		}, true},
		{"a refused write's value read", []porcupine.Operation{
			op(0, 0, 1, true, 5, "a", true),
			op(1, 2, 3, true, 4, "b", false),
			op(1, 4, 5, false, 0, "b", false),
		}, true},
		{"an overwritten value read", []porcupine.Operation{
			op(0, 0, 1, true, 5, "a", true),
			op(1, 2, 3, true, 5, "b", true),
			op(1, 4, 5, false, 0, "a", false),
		}, true},
		{"the last read not the highest write's", []porcupine.Operation{
			op(0, 0, 4, true, 5, "a", true),
			op(1, 1, 4, true, 7, "b", true),
			op(2, 5, 6, false, 0, "a", false),
		}, true},
	} {
		v := violations(c.history)
		if got := len(v) > 0; got != c.bad {
			t.Errorf("%s: violations = %q, want bad %v", c.name, v, c.bad)
		}
		if ok := porcupine.CheckOperations(regModel, c.history); ok == c.bad {
			t.Errorf("%s: porcupine says linearizable %v, want %v", c.name, ok, !c.bad)
		}
	}
}
