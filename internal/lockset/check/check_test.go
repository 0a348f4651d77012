package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"

	"github.com/zukhruf/lease/internal/lockset/history"
)

// parse reads a hand-made history, one event a line: time process f type
// [token [value]], on lock "a", as in "10 lease-1 acquire ok 3".
func parse(t *testing.T, text string) []history.Event {
	t.Helper()
	var b strings.Builder
	w := history.NewWriter(&b)
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var e history.Event
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == history.Lost {
			f = append(f, history.OK) // a loss is an event of type ok
		}
		if len(f) < 4 {
			t.Fatalf("bad line %q", line)
		}
		e.Lock = "a"
		e.T, e.P, e.F, e.Type = atoi(t, f[0]), f[1], f[2], f[3]
		if len(f) > 4 {
			e.Token = atoi(t, f[4])
		}
		if len(f) > 5 {
			e.Value = f[5]
		}
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	events, err := history.Read(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func atoi(t *testing.T, s string) int64 {
	var n int64
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = n*10 + int64(r-'0')
	}
	return n
}

// TestVerdicts feeds hand-made histories to Check and wants each verdict.
func TestVerdicts(t *testing.T) {
	fault := []Fault{{Kind: PauseHolder, Target: "lease-1", StartNS: 100, EndNS: 200}, {Kind: DeleteLockKeys, Target: "a", StartNS: 299000000, EndNS: 299000100}}
	for _, tc := range []struct {
		name   string
		text   string
		want   Counts
		linear porcupine.CheckResult
	}{{
		name: "a clean hand-over by release",
		text: `
			1 lease-1 acquire invoke
			2 lease-1 acquire ok 1
			3 lease-2 acquire invoke
			4 lease-1 write invoke 1
			5 lease-1 write ok 1
			6 lease-1 release invoke
			7 lease-2 acquire ok 2
			8 lease-1 release ok
			9 lease-2 write invoke 2
			10 lease-2 write ok 2`,
		want:   Counts{Handovers: 1, Writes: 2},
		linear: porcupine.Ok,
	}, {
		name: "a hand-over by loss: the waiter's grant after the loss",
		text: `
			1 lease-1 acquire invoke
			2 lease-1 acquire ok 1
			50 lease-2 acquire invoke
			150 lease-1 lost
			160 lease-2 acquire ok 2`,
		want:   Counts{Handovers: 1, LossEvents: 1},
		linear: porcupine.Ok,
	}, {
		name: "a possible overlap: the waiter's acquire was invoked before the loss, and its ok came after",
		text: `
			1 lease-1 acquire invoke
			2 lease-1 acquire ok 1
			50 lease-2 acquire invoke
			150 lease-1 lost
			151 lease-2 acquire ok 2`,
		want:   Counts{Handovers: 1, LossEvents: 1},
		linear: porcupine.Ok,
	}, {
		name: "a definite overlap: the second acquire's ok before the first's loss",
		text: `
			1 lease-1 acquire invoke
			2 lease-1 acquire ok 1
			30 lease-2 acquire invoke
			40 lease-2 acquire ok 2
			150 lease-1 lost`,
		want:   Counts{Overlaps: 1, Handovers: 1, LossEvents: 1},
		linear: porcupine.Illegal,
	}, {
		name: "an unsafe write: the old holder's write applied after the new holder's grant",
		text: `
			1 peer-1 acquire invoke
			2 peer-1 acquire ok 1
			3 peer-1 write invoke 1
			50 peer-2 acquire invoke
			140 peer-2 acquire ok 2
			145 peer-1 write fail 1
			150 peer-1 lost`,
		want:   Counts{Overlaps: 1, UnsafeWrites: 1, Handovers: 1, LossEvents: 1, Writes: 1, Refused: 1},
		linear: porcupine.Illegal,
	}, {
		name: "a stale write accepted",
		text: `
			101 peer-1 acquire ok 1
			102 peer-1 write invoke 1
			103 peer-1 lost
			104 peer-2 acquire ok 2
			105 peer-2 write invoke 2
			106 peer-2 write ok 2
			107 peer-1 write ok 1`,
		want:   Counts{UnsafeWrites: 1, StaleWritesAccepted: 1, InFlight: 1, Handovers: 1, LossEvents: 1, Writes: 2},
		linear: porcupine.Ok,
	}, {
		name: "the real store accepts a stale write: sent after the store answered a higher token's write",
		text: `
			101 peer-1 acquire ok 1
			102 peer-1 release invoke
			103 peer-1 release ok
			104 peer-2 acquire ok 2
			105 peer-2 store invoke 2
			106 peer-2 store ok 2
			107 peer-1 store invoke 1
			108 peer-1 store ok 1`,
		want:   Counts{Handovers: 1, StoreWrites: 2, StoreStaleWritesAccepted: 1},
		linear: porcupine.Ok,
	}, {
		name: "the real store refuses the stale write, and the next holder's equal tokens pass",
		text: `
			101 peer-1 acquire ok 1
			102 peer-1 release invoke
			103 peer-1 release ok
			104 peer-2 acquire ok 2
			105 peer-2 store invoke 2
			106 peer-2 store ok 2
			107 peer-1 store invoke 1
			108 peer-1 store fail 1
			109 peer-2 store invoke 2
			110 peer-2 store ok 2`,
		want:   Counts{Handovers: 1, StoreWrites: 3, StoreRefused: 1},
		linear: porcupine.Ok,
	}, {
		name: "the next holder's advance, answered before the old holder's store write was sent, makes it stale",
		text: `
			101 peer-1 acquire ok 1
			102 peer-1 release invoke
			103 peer-1 release ok
			104 peer-2 acquire ok 2
			105 peer-2 store invoke 2 advance
			106 peer-2 store ok 2
			107 peer-1 store invoke 1
			108 peer-1 store ok 1`,
		want:   Counts{Handovers: 1, StoreAdvances: 1, StoreWrites: 1, StoreStaleWritesAccepted: 1},
		linear: porcupine.Ok,
	}, {
		name: "an advance refused is counted apart from the writes",
		text: `
			101 peer-2 acquire ok 2
			105 peer-2 store invoke 2 advance
			106 peer-2 store ok 2
			107 peer-1 store invoke 1 advance
			108 peer-1 store fail 1
			109 peer-1 store invoke 1
			110 peer-1 store fail 1`,
		want:   Counts{StoreAdvances: 2, StoreAdvancesRefused: 1, StoreWrites: 1, StoreRefused: 1},
		linear: porcupine.Ok,
	}, {
		name: "store writes whose calls overlap are not ordered, and an unknown outcome raises no threshold",
		text: `
			101 peer-1 acquire ok 1
			102 peer-1 store invoke 1
			103 peer-2 store invoke 3
			104 peer-2 store info 3
			105 peer-3 store invoke 2
			106 peer-3 store ok 2
			107 peer-1 store ok 1`,
		want:   Counts{StoreWrites: 2},
		linear: porcupine.Ok,
	}, {
		name: "an overlap and an unsafe write with the earlier holder stopped at the grant",
		text: `
			1 lease-1 acquire ok 1
			90 lease-1 write invoke 1
			110 lease-2 acquire invoke
			150 lease-2 acquire ok 2
			201 lease-1 write fail 1
			202 lease-1 lost`,
		want:   Counts{Overlaps: 1, UnsafeWrites: 1, StoppedHolder: 2, Handovers: 1, LossEvents: 1, Writes: 1, Refused: 1},
		linear: porcupine.Illegal,
	}, {
		name: "a stopped holder that resumes and writes, lost more than 100 ms after it resumed, is not excused",
		text: `
			1 lease-1 acquire ok 1
			110 lease-2 acquire invoke
			150 lease-2 acquire ok 2
			210 lease-1 write invoke 1
			211 lease-1 write fail 1
			150000000 lease-1 lost`,
		want:   Counts{Overlaps: 1, UnsafeWrites: 1, Handovers: 1, LossEvents: 1, Writes: 1, Refused: 1},
		linear: porcupine.Illegal,
	}, {
		name: "a stopped holder that resumes and writes, lost within 100 ms of its resumption, is excused",
		text: `
			1 lease-1 acquire ok 1
			110 lease-2 acquire invoke
			150 lease-2 acquire ok 2
			210 lease-1 write invoke 1
			211 lease-1 write fail 1
			5000200 lease-1 lost`,
		want:   Counts{Overlaps: 1, UnsafeWrites: 1, StoppedHolder: 2, Handovers: 1, LossEvents: 1, Writes: 1, Refused: 1},
		linear: porcupine.Illegal,
	}, {
		name: "an overlap with the earlier holder stopped, but resumed 200 ms before the grant",
		text: `
			1 lease-1 acquire ok 1
			110 lease-2 acquire invoke
			200000250 lease-2 acquire ok 2
			200000260 lease-1 lost`,
		want:   Counts{Overlaps: 1, Handovers: 1, LossEvents: 1},
		linear: porcupine.Illegal,
	}, {
		name: "a deletion's race: the waiter granted 1 ms before the holder's loss, right after the deletion",
		text: `
			1 lease-1 acquire ok 1
			50 lease-2 acquire invoke
			300000000 lease-2 acquire ok 2
			301000000 lease-1 lost`,
		want:   Counts{Overlaps: 1, Raced: 1, Handovers: 1, LossEvents: 1},
		linear: porcupine.Illegal,
	}, {
		name: "not a race: the holder lost 300 ms after the grant that followed a deletion",
		text: `
			1 lease-1 acquire ok 1
			50 lease-2 acquire invoke
			300000000 lease-2 acquire ok 2
			600000000 lease-1 lost`,
		want:   Counts{Overlaps: 1, Handovers: 1, LossEvents: 1},
		linear: porcupine.Illegal,
	}, {
		name: "a false loss: no fault in its window",
		text: `
			1 lease-1 acquire ok 1
			500000000000 lease-1 lost`,
		want:   Counts{LossEvents: 1, FalseLosses: 1},
		linear: porcupine.Ok,
	}, {
		name: "a release then a late loss counts once, as the release",
		text: `
			1 lease-1 acquire ok 1
			5 lease-1 release invoke
			6 lease-1 lost
			7 lease-1 release ok`,
		want:   Counts{},
		linear: porcupine.Ok,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			events := parse(t, tc.text)
			dir := t.TempDir()
			res, err := Check(events, fault, Options{HTMLDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			side := Side(events[0].P)
			if diff := cmp.Diff(tc.want, res.Sides[side]); diff != "" {
				t.Errorf("counts (-want +got):\n%s\nfindings: %v", diff, res.Findings)
			}
			if got := res.Linearizable["a"]; got != tc.linear {
				t.Errorf("porcupine: %v, want %v", got, tc.linear)
			}
			if tc.want.StoppedHolder+tc.want.Raced > 0 && tc.want.Violations() == 0 && !res.Excused["a"] {
				t.Errorf("an illegal history explained by a stopped holder or a deletion's race is not excused")
			}
			violated := tc.want.Overlaps+tc.want.UnsafeWrites+tc.want.StaleWritesAccepted+tc.want.StoreStaleWritesAccepted > 0 || tc.linear == porcupine.Illegal
			if violated != (len(res.HTML) == 1) {
				t.Errorf("views written: %v; a violation: %v", res.HTML, violated)
			}
			for _, path := range res.HTML {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if filepath.Dir(path) != dir || !strings.Contains(string(b), "pause-holder lease-1") {
					t.Errorf("%s: the view does not mark the fault window", path)
				}
			}
		})
	}
}

// TestReadRefuses checks that a malformed line is an error naming it.
func TestReadRefuses(t *testing.T) {
	for _, text := range []string{
		`{"t": 1, "p": "lease-1", "lock": "a", "f": "grab", "type": "ok"}`,
		`{"t": 1, "p": "lease-1", "lock": "a", "f": "acquire", "type": "maybe"}`,
		`{"t": 1, "p": "", "lock": "a", "f": "acquire", "type": "ok"}`,
		`{"t": "x"}`,
	} {
		if _, err := history.Read(strings.NewReader("\n" + text + "\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("Read(%s) = %v, want an error naming line 2", text, err)
		}
	}
}

// TestErasureRaces feeds Check one overlap, a grant followed by the
// holder's loss, beside different erasures: which of them explain it.
//   - An operator's end of the session that holds a lock erases it on the
//     server as a deletion of its keys does, and only that lock's.
//   - An erasure takes effect somewhere in its call, from its send to its
//     reply: a grant within RaceGrant of the reply races it, however long
//     the call took.
//   - A reset of the holder's connection frees a lock that lives in its
//     session at once; where locks outlive the connection, a grant right
//     after a reset is an overlap like any other.
func TestErasureRaces(t *testing.T) {
	// The grant 300 ms in, the holder's loss 9 ms later.
	soon := `
		1 lease-1 acquire ok 1
		50 lease-2 acquire invoke
		300000000 lease-2 acquire ok 2
		309000000 lease-1 lost`
	// The grant 1.8 s in, the holder's loss 1 ms later.
	late := `
		1 lease-1 acquire ok 1
		50 lease-2 acquire invoke
		1800000000 lease-2 acquire ok 2
		1801000000 lease-1 lost`
	raced := Counts{Overlaps: 1, Raced: 1, Handovers: 1, LossEvents: 1}
	overlap := Counts{Overlaps: 1, Handovers: 1, LossEvents: 1}
	for _, tc := range []struct {
		name         string
		text         string
		fault        Fault
		sessionLocks bool
		want         Counts
	}{
		{"the session of the lock ended", soon, Fault{Kind: TerminateSession, Target: "a", StartNS: 299000000, EndNS: 299000000}, false, raced},
		{"the session of another lock ended", soon, Fault{Kind: TerminateSession, Target: "b", StartNS: 299000000, EndNS: 299000000}, false, overlap},
		{"a deletion answered 0.9 s before the grant", late, Fault{Kind: DeleteLockKeys, Target: "a", StartNS: 100000000, EndNS: 900000000}, false, raced},
		{"a deletion answered 1.1 s before the grant", late, Fault{Kind: DeleteLockKeys, Target: "a", StartNS: 100000000, EndNS: 700000000}, false, overlap},
		{"the holder's connections reset, locks in sessions", soon, Fault{Kind: CutHolder, Target: "lease-1", StartNS: 291000000, EndNS: 900000000}, true, raced},
		{"another process's connections reset", soon, Fault{Kind: CutHolder, Target: "lease-3", StartNS: 291000000, EndNS: 900000000}, true, overlap},
		{"the holder's connections reset, locks outlive them", soon, Fault{Kind: CutHolder, Target: "lease-1", StartNS: 291000000, EndNS: 900000000}, false, overlap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(parse(t, tc.text), []Fault{tc.fault}, Options{SessionLocks: tc.sessionLocks})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, res.Sides["lease"]); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFastClock: an overlap while the server's clock ran beyond the margin
// is the clock's; within the margin, or a TTL after the fault, it is an
// overlap.
func TestFastClock(t *testing.T) {
	text := `
		1 lease-1 acquire ok 1
		50 lease-2 acquire invoke
		3000000000 lease-2 acquire ok 2
		3001000000 lease-1 lost`
	clock := Counts{Overlaps: 1, Clock: 1, Handovers: 1, LossEvents: 1}
	overlap := Counts{Overlaps: 1, Handovers: 1, LossEvents: 1}
	o := Options{ClockRate: 1.1, TTL: 2 * time.Second}
	for _, tc := range []struct {
		name  string
		fault Fault
		o     Options
		want  Counts
	}{
		{"rate 2 until the grant", Fault{Kind: ClockRate, StartNS: 2000000000, EndNS: 3000000000, Rate: 2}, o, clock},
		{"rate 2 ended 1.9 s before the grant", Fault{Kind: ClockRate, StartNS: 100000000, EndNS: 1100000000, Rate: 2}, o, clock},
		{"rate 2 ended 2.1 s before the grant", Fault{Kind: ClockRate, StartNS: 100000000, EndNS: 900000000, Rate: 2}, o, overlap},
		{"rate 2 from after the grant", Fault{Kind: ClockRate, StartNS: 3000500000, EndNS: 4000000000, Rate: 2}, o, overlap},
		{"rate 1.2 measured within 0.15, maybe within the margin", Fault{Kind: ClockRate, StartNS: 2000000000, EndNS: 3000000000, Rate: 1.2, RateError: 0.15}, o, overlap},
		{"rate 1.2 measured within 0.05", Fault{Kind: ClockRate, StartNS: 2000000000, EndNS: 3000000000, Rate: 1.2, RateError: 0.05}, o, clock},
		{"rate 1.05, within the margin", Fault{Kind: ClockRate, StartNS: 2000000000, EndNS: 3000000000, Rate: 1.05}, o, overlap},
		{"rate 0.5", Fault{Kind: ClockRate, StartNS: 2000000000, EndNS: 3000000000, Rate: 0.5}, o, overlap},
		{"no margin given", Fault{Kind: ClockRate, StartNS: 2000000000, EndNS: 3000000000, Rate: 2}, Options{}, overlap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(parse(t, text), []Fault{tc.fault}, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, res.Sides["lease"]); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if got := res.Sides["lease"].Violations(); got != tc.want.Overlaps-tc.want.Clock {
				t.Errorf("Violations() = %d, want %d", got, tc.want.Overlaps-tc.want.Clock)
			}
		})
	}
}

// TestLateRecords: what a lease cannot help, counted apart. A write sent
// before its writer's loss and applied after another's later grant was in
// flight; one sent after the loss was not. A holder resumed from a stop
// just before another's grant, and lost just after it, lost the lock as
// it resumed; one resumed long before was late.
func TestLateRecords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		text   string
		faults []Fault
		want   Counts
	}{
		{"a write in flight", `
			1 lease-1 acquire ok 1
			100 lease-1 write invoke 1
			200 lease-1 lost
			300 lease-2 acquire ok 2
			400 lease-1 write ok 1`, nil,
			Counts{UnsafeWrites: 1, InFlight: 1, Handovers: 1, LossEvents: 1, FalseLosses: 1, Writes: 1}},
		{"a write sent after the loss", `
			1 lease-1 acquire ok 1
			200 lease-1 lost
			250 lease-1 write invoke 1
			300 lease-2 acquire ok 2
			400 lease-1 write ok 1`, nil,
			Counts{UnsafeWrites: 1, Handovers: 1, LossEvents: 1, FalseLosses: 1, Writes: 1}},
		{"resumed 3 ms before the grant, lost 8 ms after resuming", `
			1 lease-1 acquire ok 1
			3003000000 lease-2 acquire ok 2
			3008000000 lease-1 lost`, []Fault{{Kind: PauseHolder, Target: "lease-1", StartNS: 1000000, EndNS: 3000000000}},
			Counts{Overlaps: 1, StoppedHolder: 1, Handovers: 1, LossEvents: 1}},
		{"resumed 300 ms before the grant", `
			1 lease-1 acquire ok 1
			3300000000 lease-2 acquire ok 2
			3301000000 lease-1 lost`, []Fault{{Kind: PauseHolder, Target: "lease-1", StartNS: 1000000, EndNS: 3000000000}},
			Counts{Overlaps: 1, Handovers: 1, LossEvents: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(parse(t, tc.text), tc.faults, Options{LossWindow: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, res.Sides["lease"]); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}
