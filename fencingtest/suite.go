package fencingtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/internal/faultnet"
)

// Store is one client of a fenced store, as the suite sees it: a register
// per resource that holds a value and the token it was written with.
type Store interface {
	// Write writes value to resource with token if token is at least the
	// highest token resource's fence accepted, raising the fence to token,
	// in one atomic step at the store; otherwise it writes nothing and
	// returns an error wrapping a *[fencing.StaleError].
	Write(ctx context.Context, resource string, token int64, value string) error

	// Advance raises resource's fence to token without a write, or
	// returns an error wrapping a *[fencing.StaleError].
	Advance(ctx context.Context, resource string, token int64) error

	// Get reads resource's value and the token it was written with: "" and
	// 0 if none was.
	Get(ctx context.Context, resource string) (value string, token int64, err error)

	// Put writes value and token to resource without a fence: the write of
	// the negative controls.
	Put(ctx context.Context, resource string, value string, token int64) error
}

// Harness is what [Run] needs of one fenced store.
type Harness struct {
	// Addr is the store's address, host:port, which the suite passes to
	// Open as it is, or that of a loopback proxy in front of it. In a
	// child process of the suite ([Child]) it may be empty.
	Addr string

	// Open returns a Store on a client of its own that reaches the store
	// at addr, as a second process would have. It closes the client with
	// t.Cleanup.
	Open func(t *testing.T, addr string) Store
}

// The environment of the suite's child processes.
const (
	envAddr     = "FENCINGTEST_ADDR"     // the store's address
	envRole     = "FENCINGTEST_ROLE"     // "paused": the paused holder
	envResource = "FENCINGTEST_RESOURCE" // the paused holder's resource
	envControl  = "FENCINGTEST_CONTROL"  // a negative control's name
)

// Child reports whether this process is one that the suite started (the
// paused holder, a negative control): its TestMain should not start a
// store, whose address the suite passes on.
func Child() bool { return os.Getenv(envAddr) != "" }

// Run checks h's store against the fencing rule, each check a subtest, on
// resources of its own named "fencingtest-<time>-<check>":
//
//   - EqualTokenPasses: a write with the token the fence holds passes.
//   - LowerRefused: a lower token is refused with a *[fencing.StaleError]
//     naming both tokens, the value stays, and Advance fences alone.
//   - PausedHolder: a holder in a child process (the test binary, run
//     again on the test that called Run) is stopped with SIGSTOP in its
//     write past its lease; the next holder writes; SIGCONT: its write is
//     refused and the store reads back the next holder's value.
//   - DelayedRequest: a holder's write is held in a loopback proxy
//     ([faultnet]) while the next holder writes: it is refused.
//   - RacingWriters: 32 writers on clients of their own, with random
//     tokens from a window that climbs with each writer's writes so that
//     the race never settles, each write followed by a read; all 32 on
//     one resource, then 8 on each of 4. The histories are checked against
//     fenced registers by rules on the calls' intervals, and by porcupine,
//     which decides the 4 resources' and may not finish the one's in 5 s.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		panic("fencingtest: Run called with a Harness without Open")
	}
	if a := os.Getenv(envAddr); a != "" {
		h.Addr = a
	}
	if h.Addr == "" {
		panic("fencingtest: Run called with a Harness without Addr")
	}
	if os.Getenv(envRole) == "paused" {
		pausedChild(t, h)
		return
	}
	s := &suite{h: h, prefix: fmt.Sprintf("fencingtest-%d-", time.Now().UnixNano()), test: t.Name()}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"EqualTokenPasses", s.equalTokenPasses},
		{"LowerRefused", s.lowerRefused},
		{"PausedHolder", s.pausedHolder},
		{"DelayedRequest", s.delayedRequest},
		{"RacingWriters", s.racingWriters},
	} {
		t.Run(c.name, c.run)
	}
}

type suite struct {
	h      Harness
	prefix string
	test   string // the name of the test that called Run, for its children
}

func (s *suite) resource(t *testing.T, n int) string {
	name := t.Name()
	name = name[strings.LastIndexByte(name, '/')+1:]
	return s.prefix + strings.ToLower(name) + "-" + strconv.Itoa(n)
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// wantStale fails t unless err is the refusal of token by current.
func wantStale(t *testing.T, what string, err error, resource string, token, current int64) {
	t.Helper()
	var se *fencing.StaleError
	if !errors.Is(err, fencing.ErrStale) || !errors.As(err, &se) {
		t.Errorf("%s = %v, want a *fencing.StaleError", what, err)
		return
	}
	if se.Resource != resource || se.Token != token || se.Current != current {
		t.Errorf("%s = %+v, want resource %q, token %d, current %d", what, *se, resource, token, current)
	}
}

func wantValue(t *testing.T, ctx context.Context, st Store, resource, value string, token int64) {
	t.Helper()
	v, tok, err := st.Get(ctx, resource)
	if err != nil {
		t.Fatalf("Get(%s) = %v", resource, err)
	}
	if v != value || tok != token {
		t.Errorf("Get(%s) = %q, %d, want %q, %d", resource, v, tok, value, token)
	}
}

func (s *suite) equalTokenPasses(t *testing.T) {
	ctx := ctxOf(t)
	st := s.h.Open(t, s.h.Addr)
	r := s.resource(t, 0)
	for _, v := range []string{"first", "second"} {
		if err := st.Write(ctx, r, 3, v); err != nil {
			t.Fatalf("Write(3, %s) = %v, want nil", v, err)
		}
	}
	wantValue(t, ctx, st, r, "second", 3)
	if err := st.Advance(ctx, r, 3); err != nil {
		t.Errorf("Advance(3) after a write of 3 = %v, want nil", err)
	}
}

func (s *suite) lowerRefused(t *testing.T) {
	ctx := ctxOf(t)
	st := s.h.Open(t, s.h.Addr)
	r := s.resource(t, 0)
	if err := st.Write(ctx, r, 5, "five"); err != nil {
		t.Fatalf("Write(5) = %v, want nil", err)
	}
	wantStale(t, "Write(4) after 5", st.Write(ctx, r, 4, "four"), r, 4, 5)
	wantValue(t, ctx, st, r, "five", 5)
	// Advance on grant: the fence alone refuses the older holder's write.
	if err := st.Advance(ctx, r, 7); err != nil {
		t.Fatalf("Advance(7) = %v, want nil", err)
	}
	wantStale(t, "Write(6) after Advance(7)", st.Write(ctx, r, 6, "six"), r, 6, 7)
	wantStale(t, "Advance(6) after Advance(7)", st.Advance(ctx, r, 6), r, 6, 7)
	wantValue(t, ctx, st, r, "five", 5)
	if err := st.Write(ctx, r, 7, "seven"); err != nil {
		t.Fatalf("Write(7) after Advance(7) = %v, want nil", err)
	}
	wantValue(t, ctx, st, r, "seven", 7)
}

// pauseKey carries the pause point of a write: a control calls it between
// its check and its write, a fence that writes in one step never does, and
// the suite calls it before such a fence's write.
type pauseKey struct{}

func withPause(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, pauseKey{}, f)
}

// pause runs ctx's pause point, or sleeps up to 10 ms where ctx has
// none, as a holder's GC pause would.
func pause(ctx context.Context) {
	if f, ok := ctx.Value(pauseKey{}).(func()); ok {
		f()
		return
	}
	time.Sleep(time.Duration(rand.IntN(10000)) * time.Microsecond)
}

// writePaused writes through st with f as its pause point: inside the
// write of a fence that has one (a control), before the write otherwise.
func writePaused(ctx context.Context, st Store, f func(), resource string, token int64, value string) error {
	if _, split := st.(splitWrite); split {
		return st.Write(withPause(ctx, f), resource, token, value)
	}
	f()
	return st.Write(ctx, resource, token, value)
}

// splitWrite marks the negative controls: a write in two steps, with a
// pause point between them.
type splitWrite interface{ splitWrite() }

const (
	pausedLine = "fencingtest: paused"
	wroteLine  = "fencingtest: wrote: "
)

// testPattern is the -test.run pattern of the test named name.
func testPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func (s *suite) pausedHolder(t *testing.T) {
	ctx := ctxOf(t)
	r := s.resource(t, 0)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+testPattern(s.test), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envAddr+"="+s.h.Addr, envRole+"=paused", envResource+"="+r)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	lines := bufio.NewScanner(io.TeeReader(stdout, &out))
	waitLine := func(prefix string) (string, bool) {
		for lines.Scan() {
			if l := lines.Text(); strings.HasPrefix(l, prefix) {
				return strings.TrimPrefix(l, prefix), true
			}
		}
		return "", false
	}
	fail := func(format string, args ...any) {
		t.Helper()
		_ = cmd.Process.Kill()
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		t.Fatalf(format+"\nthe paused holder's output:\n%s%s", append(args, out.String(), stderr.String())...)
	}
	if _, ok := waitLine(pausedLine); !ok {
		fail("the paused holder never reached its pause point")
	}
	// Stopped where it is, past its lease: the next holder takes the
	// subject (token 2), raises the fence on grant and writes.
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		fail("SIGSTOP: %v", err)
	}
	next := s.h.Open(t, s.h.Addr)
	if err := next.Advance(ctx, r, 2); err != nil {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		fail("the next holder's Advance(2) = %v", err)
	}
	if err := next.Write(ctx, r, 2, "next holder"); err != nil {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		fail("the next holder's Write(2) = %v", err)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
		fail("SIGCONT: %v", err)
	}
	if _, err := io.WriteString(stdin, "\n"); err != nil {
		fail("resume the paused holder: %v", err)
	}
	got, ok := waitLine(wroteLine)
	if !ok {
		fail("the paused holder never wrote")
	}
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the paused holder: %v\n%s%s", err, out.String(), stderr.String())
	}
	want := "stale: token 1, current 2"
	if got != want {
		t.Errorf("the paused holder's write after the next holder's = %q, want %q", got, want)
	}
	wantValue(t, ctx, next, r, "next holder", 2)
}

// pausedChild is the paused holder, in the child process: token 1, raised
// on grant, then its write with a pause point that waits for a line on
// stdin, where the parent stops it.
func pausedChild(t *testing.T, h Harness) {
	ctx := ctxOf(t)
	r := os.Getenv(envResource)
	st := h.Open(t, h.Addr)
	if err := st.Advance(ctx, r, 1); err != nil {
		t.Fatalf("Advance(1) = %v", err)
	}
	in := bufio.NewReader(os.Stdin)
	err := writePaused(ctx, st, func() {
		fmt.Println(pausedLine)
		_, _ = in.ReadString('\n')
	}, r, 1, "paused holder")
	var se *fencing.StaleError
	switch {
	case err == nil:
		fmt.Println(wroteLine + "accepted")
	case errors.As(err, &se):
		fmt.Printf("%sstale: token %d, current %d\n", wroteLine, se.Token, se.Current)
	default:
		fmt.Println(wroteLine + "error: " + err.Error())
	}
}

func (s *suite) delayedRequest(t *testing.T) {
	ctx := ctxOf(t)
	p, err := faultnet.Listen(s.h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	held := s.h.Open(t, p.Addr())
	next := s.h.Open(t, s.h.Addr)
	// The held holder's write is read by the proxy after the pause point,
	// so it reaches the store delay later; the next holder's write, done
	// before that, came first. A next write slower than delay (a loaded
	// machine) proves nothing: the trial is run again with twice the delay.
	for i, delay := 0, 200*time.Millisecond; i < 5; i, delay = i+1, 2*delay {
		r := s.resource(t, i)
		if err := held.Advance(ctx, r, 1); err != nil {
			t.Fatalf("Advance(1) = %v", err)
		}
		start := make(chan time.Time, 1)
		done := make(chan error, 1)
		go func() {
			done <- writePaused(ctx, held, func() {
				p.Delay(delay)
				start <- time.Now()
			}, r, 1, "held holder")
		}()
		var t0 time.Time
		select {
		case t0 = <-start:
		case err := <-done:
			t.Fatalf("the held write returned before its pause point: %v", err)
		}
		err := next.Write(ctx, r, 2, "next holder")
		elapsed := time.Since(t0)
		heldErr := <-done
		p.Heal()
		if err != nil {
			t.Fatalf("the next holder's Write(2) = %v, want nil", err)
		}
		if elapsed >= delay {
			t.Logf("the next write took %v, not under the delay %v: again", elapsed, delay)
			continue
		}
		wantStale(t, "the held Write(1), which reached the store after Write(2)", heldErr, r, 1, 2)
		wantValue(t, ctx, next, r, "next holder", 2)
		return
	}
	t.Fatal("the next holder's write never finished within the delay of the held one")
}

// The fenced register, porcupine's model: the value and the token of the
// last accepted write.
type regState struct {
	token int64
	value string
}

type regInput struct {
	key   int // the resource's index in the race
	write bool
	token int64
	value string
}

type regOutput struct {
	ok    bool   // a write accepted
	value string // a read's value
}

var regModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		var parts [][]porcupine.Operation
		for _, op := range history {
			k := op.Input.(regInput).key
			for len(parts) <= k {
				parts = append(parts, nil)
			}
			parts[k] = append(parts[k], op)
		}
		return parts
	},
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		if !in.write {
			return out.value == s.value, s
		}
		if in.token >= s.token {
			return out.ok, regState{in.token, in.value}
		}
		return !out.ok, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if !in.write {
			return fmt.Sprintf("Get() -> %q", out.value)
		}
		if out.ok {
			return fmt.Sprintf("Write(%d, %q) -> ok", in.token, in.value)
		}
		return fmt.Sprintf("Write(%d, %q) -> stale", in.token, in.value)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		return fmt.Sprintf("%d: %q", s.token, s.value)
	},
}

const (
	writers   = 32
	opsPerRun = 12
)

func (s *suite) racingWriters(t *testing.T) {
	ctx := ctxOf(t)
	stores := make([]Store, writers)
	for i := range stores {
		stores[i] = s.h.Open(t, s.h.Addr)
	}
	// All 32 on one resource: the hardest race, whose history porcupine's
	// search may not finish; the interval checks decide.
	one := s.race(ctx, t, stores, []string{s.resource(t, 0)})
	// 8 on each of 4 resources: histories that porcupine decides.
	four := s.race(ctx, t, stores, []string{s.resource(t, 1), s.resource(t, 2), s.resource(t, 3), s.resource(t, 4)})
	if t.Failed() {
		return
	}
	for _, c := range []struct {
		history []porcupine.Operation
		budget  time.Duration
	}{{one, 5 * time.Second}, {four, time.Minute}} {
		var bad []string
		for _, part := range regModel.Partition(c.history) {
			bad = append(bad, violations(part)...)
		}
		for i, v := range bad {
			if i == 10 {
				t.Errorf("and %d more", len(bad)-i)
				break
			}
			t.Errorf("a stale write accepted or a fresh one refused: %s", v)
		}
		res, info := porcupine.CheckOperationsVerbose(regModel, c.history, c.budget)
		switch res {
		case porcupine.Ok:
		case porcupine.Unknown:
			t.Logf("porcupine did not finish the history of %d operations in %v; the interval checks passed it", len(c.history), c.budget)
		default:
			view := "not written"
			if f, err := os.CreateTemp("", "fencingtest-history-*.html"); err == nil {
				_ = porcupine.Visualize(regModel, info, f)
				_ = f.Close()
				view = f.Name()
			}
			t.Errorf("the %d writers' history is not that of fenced registers; porcupine's view: %s", writers, view)
		}
	}
}

// race runs the writers on stores, writer w on resources[w%len], each
// write followed by a read, then reads each resource once more, and
// returns the history.
func (s *suite) race(ctx context.Context, t *testing.T, stores []Store, resources []string) []porcupine.Operation {
	base := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	for w, st := range stores {
		k := w % len(resources)
		r := resources[k]
		wg.Go(func() {
			<-start
			for i := range opsPerRun {
				in := regInput{key: k}
				var out regOutput
				call := time.Since(base).Nanoseconds()
				if i%2 == 1 { // a read right after each write: a lost update shows
					v, _, err := st.Get(ctx, r)
					if err != nil {
						t.Errorf("writer %d: Get = %v", w, err)
						return
					}
					out.value = v
				} else {
					in.write, in.token, in.value = true, 1+4*int64(i/2)+rand.Int64N(8), fmt.Sprintf("w%d-%d", w, i)
					err := st.Write(ctx, r, in.token, in.value)
					if err != nil && !errors.Is(err, fencing.ErrStale) {
						t.Errorf("writer %d: Write(%d) = %v, want nil or stale", w, in.token, err)
						return
					}
					out.ok = err == nil
				}
				ret := time.Since(base).Nanoseconds()
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	// The last read of each resource, after every write returned.
	for k, r := range resources {
		call := time.Since(base).Nanoseconds()
		v, _, err := stores[0].Get(ctx, r)
		if err != nil {
			t.Errorf("Get = %v", err)
			continue
		}
		history = append(history, porcupine.Operation{ClientId: writers + k, Input: regInput{key: k}, Call: call, Output: regOutput{value: v}, Return: time.Since(base).Nanoseconds()})
	}
	return history
}

// violations returns the operations of history that no fenced register
// allows, each by a rule that needs no search: a refused write with no
// higher accepted write that began before it returned; an accepted write
// that began after a higher accepted one returned; a read of a value that
// a refused write wrote, that a later write had overwritten, or whose
// token is below that of an accepted write that returned before the read
// began; a last read that is not the highest accepted write's.
func violations(history []porcupine.Operation) []string {
	var out []string
	writes := map[string]porcupine.Operation{} // by value, each unique
	var accepted []porcupine.Operation
	for _, op := range history {
		if in := op.Input.(regInput); in.write {
			writes[in.value] = op
			if op.Output.(regOutput).ok {
				accepted = append(accepted, op)
			}
		}
	}
	tok := func(op porcupine.Operation) int64 { return op.Input.(regInput).token }
	describe := regModel.DescribeOperation
	var last porcupine.Operation
	for _, op := range history {
		in, res := op.Input.(regInput), op.Output.(regOutput)
		if !in.write {
			if op.Call > last.Call || last.Input == nil {
				last = op
			}
			if res.value == "" {
				for _, a := range accepted {
					if a.Return < op.Call {
						out = append(out, fmt.Sprintf("%s after %s returned", describe(op.Input, op.Output), describe(a.Input, a.Output)))
						break
					}
				}
				continue
			}
			w, ok := writes[res.value]
			switch {
			case !ok || !w.Output.(regOutput).ok:
				out = append(out, fmt.Sprintf("%s: the value of a refused write", describe(op.Input, op.Output)))
				continue
			case w.Call > op.Return:
				out = append(out, fmt.Sprintf("%s before its write began", describe(op.Input, op.Output)))
				continue
			}
			for _, a := range accepted {
				if a.Return < op.Call && (tok(a) > tok(w) || a.Call > w.Return) {
					out = append(out, fmt.Sprintf("%s after %s returned", describe(op.Input, op.Output), describe(a.Input, a.Output)))
					break
				}
			}
			continue
		}
		if !res.ok {
			cause := false
			for _, a := range accepted {
				cause = cause || (tok(a) > in.token && a.Call < op.Return)
			}
			if !cause {
				out = append(out, fmt.Sprintf("%s with no higher token accepted before", describe(op.Input, op.Output)))
			}
			continue
		}
		for _, a := range accepted {
			if tok(a) > in.token && a.Return < op.Call {
				out = append(out, fmt.Sprintf("%s after %s returned", describe(op.Input, op.Output), describe(a.Input, a.Output)))
				break
			}
		}
	}
	if last.Input != nil && len(accepted) > 0 {
		var top int64
		for _, a := range accepted {
			top = max(top, tok(a))
		}
		if w, ok := writes[last.Output.(regOutput).value]; !ok || tok(w) != top {
			out = append(out, fmt.Sprintf("the last %s, when token %d was accepted", describe(last.Input, last.Output), top))
		}
	}
	return out
}
