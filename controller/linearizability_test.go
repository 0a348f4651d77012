package controller_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/internal/model"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

var linHistories = flag.Int("lin.histories", 1000, "number of concurrent histories TestLinearizable records and checks")

// The operations of a history. Fate is not a call on the lease: after the
// concurrent part, it reports whether a registration's callback ran, so
// that the checker places each AfterLoss and stop where the callback's fate
// agrees with the model.
type opKind uint8

const (
	opLose opKind = iota
	opEnd
	opErr
	opDone
	opAfterLoss
	opStop
	opFate
	opContext // Context: a registration, as AfterLoss is
	opCancel  // the context's cancel: a stop whose result no call reports
)

var opNames = [...]string{"Lose", "End", "Err", "Done", "AfterLoss", "stop", "fate", "Context", "cancel"}

type linInput struct {
	Kind  opKind
	Cause model.Cause // Lose
	Reg   int         // AfterLoss, stop, fate: the registration's number in the history
}

type linOutput struct {
	OK    bool        // Lose, End, stop: the result; Done: the channel was closed; fate: the callback ran
	Lost  bool        // Err: it returned a *lost.Error
	Cause model.Cause // Err: the cause it wraps
}

// maxRegs bounds the registrations of one history, so that the checker's
// state is a comparable value.
const maxRegs = 32

// linState is the model's lease in a form porcupine can compare with ==:
// the model's callbacks kept by registration number, not by the order in
// which one linearization happened to register them.
type linState struct {
	Phase model.Phase
	Cause model.Cause
	Regs  [maxRegs]byte // 0: not registered; else 1 + the model.Callback
}

// lease returns the model's lease for s and, for each registration number,
// its index in the model's Callbacks.
func (s linState) lease() (model.Lease, map[int]int) {
	m := model.Lease{Phase: s.Phase, Cause: s.Cause}
	idx := make(map[int]int)
	for id, b := range s.Regs {
		if b != 0 {
			idx[id] = len(m.Callbacks)
			m.Callbacks = append(m.Callbacks, model.Callback(b-1))
		}
	}
	return m, idx
}

func stateOf(m model.Lease, idx map[int]int) linState {
	s := linState{Phase: m.Phase, Cause: m.Cause}
	for id, i := range idx {
		s.Regs[id] = byte(m.Callbacks[i]) + 1
	}
	return s
}

// linStep is the model's step: what each call returns and how it moves the
// lease, taken from internal/model, the specification the property test
// uses too.
func linStep(state, input, output any) (bool, any) {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	m, idx := s.lease()
	ok := true
	switch in.Kind {
	case opLose:
		ok = m.Lose(in.Cause) == out.OK
	case opEnd:
		ok = m.End() == out.OK
	case opErr:
		lost, cause := m.Err()
		ok = out.Lost == lost && (!lost || out.Cause == cause)
	case opDone:
		ok = m.DoneClosed() == out.OK
	case opAfterLoss, opContext:
		idx[in.Reg] = m.AfterLoss()
	case opCancel:
		// A cancel that races the loss may run before the loss reaches
		// its context or after, whatever Err showed meanwhile (a loss is
		// not atomic across the views of the lease): record only that
		// the holder let go of the context. Its fate is not checked.
		m.Stop(idx[in.Reg])
	case opStop:
		ok = m.Stop(idx[in.Reg]) == out.OK
	case opFate:
		ok = (m.Callbacks[idx[in.Reg]] == model.Started) == out.OK
	}
	return ok, stateOf(m, idx)
}

var linModel = porcupine.Model{
	Init: func() any { return linState{} },
	Step: linStep,
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		switch in.Kind {
		case opLose:
			return fmt.Sprintf("Lose(cause %d) -> %v", in.Cause, out.OK)
		case opErr:
			if !out.Lost {
				return "Err() -> nil"
			}
			return fmt.Sprintf("Err() -> lost, cause %d", out.Cause)
		case opDone:
			if out.OK {
				return "Done() -> closed"
			}
			return "Done() -> open"
		case opAfterLoss, opContext, opCancel:
			return fmt.Sprintf("%s #%d", opNames[in.Kind], in.Reg)
		case opStop, opFate:
			return fmt.Sprintf("%s #%d -> %v", opNames[in.Kind], in.Reg, out.OK)
		}
		return fmt.Sprintf("%s() -> %v", opNames[in.Kind], out.OK)
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		var b strings.Builder
		b.WriteString(s.Phase.String())
		if s.Phase == model.Lost {
			fmt.Fprintf(&b, " (cause %d)", s.Cause)
		}
		for id, c := range s.Regs {
			if c != 0 {
				fmt.Fprintf(&b, " #%d:%v", id, model.Callback(c-1))
			}
		}
		return b.String()
	},
}

// leaseUnderTest is what a history calls: a controller with its signal, or
// a deliberately broken stand-in that the checker must reject.
type leaseUnderTest interface {
	Lose(cause error) bool
	End() bool
	Err() error
	Done() <-chan struct{}
	AfterLoss(f func()) (stop func() bool)
	Context(parent context.Context) (context.Context, context.CancelFunc)
}

type realLease struct {
	*controller.Controller
	*signal.Signal
}

func newRealLease(subject string) realLease {
	c := controller.New(subject)
	return realLease{c, c.Signal()}
}

// linCauses are the causes of a history's Lose calls: client i loses with
// linCauses[i], so the Err a client sees names the client whose Lose won.
var linCauses = func() []error {
	causes := []error{nil}
	for i := 1; i < 8; i++ {
		causes = append(causes, fmt.Errorf("client %d lost it", i))
	}
	return causes
}()

type linOp struct {
	Kind       opKind
	Reg        int  // AfterLoss, Context: the number to give the registration; stop, cancel: which to stop
	Yield      bool // yield the processor inside the call, so that calls overlap more often
	Background bool // Context: made from Background, not from a live request's context
}

// linRequest is the live parent of the contexts that a history makes from a
// request's context.
var linRequest, _ = context.WithCancel(context.WithValue(context.Background(), propKey{}, "request"))

// scriptContexts draws a script as script does, and makes half of its
// AfterLoss registrations contexts, from Background or from a request's
// context, whose stops are then their cancels.
func scriptContexts(r *rand.Rand) [][]linOp {
	clients := script(r)
	isCtx := map[int]bool{}
	for _, c := range clients {
		for i := range c {
			op := &c[i]
			switch {
			case op.Kind == opAfterLoss && r.IntN(2) == 0:
				op.Kind, op.Background = opContext, r.IntN(2) == 0
				isCtx[op.Reg] = true
			case op.Kind == opStop && isCtx[op.Reg]:
				op.Kind = opCancel
			}
		}
	}
	return clients
}

// script draws what each of 4 to 8 clients does: one to four calls each.
// A client stops only a registration it made earlier.
func script(r *rand.Rand) [][]linOp {
	clients := make([][]linOp, 4+r.IntN(5))
	reg := 0
	for i := range clients {
		var mine []int
		for range 1 + r.IntN(4) {
			k := opKind(r.IntN(int(opStop) + 1))
			if k == opStop && len(mine) == 0 {
				k = opAfterLoss
			}
			op := linOp{Kind: k, Yield: r.IntN(2) == 0}
			switch k {
			case opAfterLoss:
				op.Reg = reg
				mine = append(mine, reg)
				reg++
			case opStop:
				op.Reg = mine[r.IntN(len(mine))]
			}
			clients[i] = append(clients[i], op)
		}
	}
	return clients
}

// record runs the clients' calls on l at once, one goroutine each, stamping
// call and return from one atomic clock, then appends the fate of every
// registration. It reports a callback that ran twice as an error, since no
// sequential specification has room for that.
func record(l leaseUnderTest, clients [][]linOp) ([]porcupine.Operation, error) {
	var (
		clock     atomic.Int64
		ready     atomic.Int32
		wg        sync.WaitGroup
		ops       = make([][]porcupine.Operation, len(clients))
		runs      [maxRegs]atomic.Int32
		ran       [maxRegs]chan struct{}
		regs      = map[int]bool{}
		ctxs      [maxRegs]context.Context
		cancels   [maxRegs]context.CancelFunc
		cancelled [maxRegs]atomic.Bool
	)
	// Every context made is cancelled once the history is checked, so that
	// the request's context keeps no child of it.
	defer func() {
		for _, cancel := range cancels {
			if cancel != nil {
				cancel()
			}
		}
	}()
	var stopped [maxRegs]atomic.Bool
	for _, c := range clients {
		for _, op := range c {
			if op.Kind == opAfterLoss || op.Kind == opContext {
				regs[op.Reg] = true
				ran[op.Reg] = make(chan struct{})
			}
		}
	}
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stops := map[int]func() bool{}
			// Start together: a channel would wake the clients one by one,
			// and the first would often finish before the last started.
			ready.Add(1)
			for ready.Load() < int32(len(clients)) {
				runtime.Gosched()
			}
			for _, op := range c {
				in := linInput{Kind: op.Kind, Cause: model.Cause(i % len(linCauses)), Reg: op.Reg}
				var out linOutput
				call := clock.Add(1)
				if op.Yield {
					// Between the stamps, so the call's interval still
					// holds the call: it only grows.
					runtime.Gosched()
				}
				switch op.Kind {
				case opLose:
					out.OK = l.Lose(linCauses[in.Cause])
				case opEnd:
					out.OK = l.End()
				case opErr:
					if err := l.Err(); err != nil {
						var le *lost.Error
						out.Lost, out.Cause = true, -1
						if errors.As(err, &le) {
							out.Cause = causeIn(linCauses, le.Unwrap())
						}
					}
				case opDone:
					out.OK = closedNow(l.Done())
				case opAfterLoss:
					id := op.Reg
					stops[id] = l.AfterLoss(func() {
						if runs[id].Add(1) == 1 {
							close(ran[id])
						}
					})
				case opStop:
					out.OK = stops[op.Reg]()
					if out.OK {
						stopped[op.Reg].Store(true)
					}
				case opContext:
					parent := linRequest
					if op.Background {
						parent = context.Background()
					}
					ctxs[op.Reg], cancels[op.Reg] = l.Context(parent)
				case opCancel:
					cancels[op.Reg]()
					cancelled[op.Reg].Store(true)
				}
				ret := clock.Add(1)
				ops[i] = append(ops[i], porcupine.Operation{ClientId: i, Input: in, Call: call, Output: out, Return: ret})
			}
		}()
	}
	wg.Wait()

	var history []porcupine.Operation
	for _, o := range ops {
		history = append(history, o...)
	}
	// Fates, one after the other, once every call has returned. After a loss
	// every registration not stopped must run: wait for it, bounded only
	// against a hang. Without a loss none may run.
	lostAtEnd := l.Err() != nil
	for id := range maxRegs {
		if !regs[id] {
			continue
		}
		if cancelled[id].Load() {
			continue // see opCancel in linStep
		}
		if ctx := ctxs[id]; ctx != nil {
			// Cancelled only by the loss, which every call that has
			// returned has finished with.
			n := int32(0)
			var le *lost.Error
			if errors.As(context.Cause(ctx), &le) {
				n = 1
				if err := l.Err(); err != le {
					return history, fmt.Errorf("context #%d cancelled with %v, but Err() = %v", id, le, err)
				}
			} else if ctx.Err() != nil {
				return history, fmt.Errorf("context #%d done with %v, not with the loss", id, context.Cause(ctx))
			}
			runs[id].Store(n)
		}
		if lostAtEnd && !stopped[id].Load() && ctxs[id] == nil {
			select {
			case <-ran[id]:
			case <-time.After(hangGuard):
			}
		}
		n := runs[id].Load()
		if n > 1 {
			return history, fmt.Errorf("callback #%d ran %d times", id, n)
		}
		call := clock.Add(1)
		history = append(history, porcupine.Operation{
			ClientId: len(clients),
			Input:    linInput{Kind: opFate, Reg: id},
			Call:     call,
			Output:   linOutput{OK: n == 1},
			Return:   clock.Add(1),
		})
	}
	return history, nil
}

// concurrent reports whether two clients' calls overlap in history.
func concurrent(history []porcupine.Operation) bool {
	for i, a := range history {
		for _, b := range history[i+1:] {
			if a.ClientId != b.ClientId && a.Call < b.Return && b.Call < a.Return {
				return true
			}
		}
	}
	return false
}

func causeIn(causes []error, cause error) model.Cause {
	for i, c := range causes {
		if c == cause {
			return model.Cause(i)
		}
	}
	return -1
}

// checkHistory checks history against m. When it is not linearizable it
// writes porcupine's visualization to a file and returns its path.
func checkHistory(m porcupine.Model, history []porcupine.Operation) (ok bool, visualization string, err error) {
	res, info := porcupine.CheckOperationsVerbose(m, history, 0)
	if res == porcupine.Ok {
		return true, "", nil
	}
	f, err := os.CreateTemp("", "lease-history-*.html")
	if err != nil {
		return false, "", err
	}
	defer f.Close()
	if err := porcupine.Visualize(m, info, f); err != nil {
		return false, f.Name(), err
	}
	return false, f.Name(), f.Close()
}

// TestLinearizable records concurrent histories of Lose, End, Err, Done,
// AfterLoss and stop on one lease and checks each against the model.
func TestLinearizable(t *testing.T) { checkLinearizable(t, script) }

// TestLinearizableContexts records concurrent histories as TestLinearizable
// does, where half the registrations are contexts made by Signal.Context
// from Background or from a request's context, and half the stops their
// cancels, on leases with and without the registry's set of shards: a
// context the holder never cancels is cancelled with the very error Err
// returns exactly when the model has its registration started by the loss.
func TestLinearizableContexts(t *testing.T) { checkLinearizable(t, scriptContexts) }

// checkLinearizable records -lin.histories histories of the clients that
// makeScript writes, every other one on a lease whose registry is spread
// over shards, and checks each against the model.
func checkLinearizable(t *testing.T, makeScript func(*rand.Rand) [][]linOp) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	overlapping := 0
	for h := range *linHistories {
		clients := makeScript(r)
		l := newRealLease("orders")
		if h%2 == 1 {
			controller.Spread(l.Controller)
		}
		history, err := record(l, clients)
		if err != nil {
			t.Fatalf("history %d (seed %d): %v", h, seed, err)
		}
		ok, vis, err := checkHistory(linModel, history)
		if err != nil {
			t.Fatalf("history %d (seed %d) is not linearizable; writing the visualization: %v", h, seed, err)
		}
		if !ok {
			t.Fatalf("history %d (seed %d) is not linearizable; see %s", h, seed, vis)
		}
		if concurrent(history) {
			overlapping++
		}
	}
	// How many histories had calls of two clients in flight at once: a
	// figure of how hard the run pressed, not a condition of passing.
	t.Logf("%d histories linearizable, %d with overlapping calls (seed %d)", *linHistories, overlapping, seed)
}

// overwritingLease is a broken lease: its Err reports the cause of the last
// Lose call, not of the one that won.
type overwritingLease struct {
	realLease
	last atomic.Pointer[error]
}

func (l *overwritingLease) Lose(cause error) bool {
	l.last.Store(&cause)
	return l.realLease.Lose(cause)
}

func (l *overwritingLease) Err() error {
	if l.realLease.Err() == nil {
		return nil
	}
	return lost.New(l.Subject(), *l.last.Load())
}

// lateDoneLease is a broken lease: its Done channel closes some time after
// Err reports the loss (Go issue 75533 in context), here never.
type lateDoneLease struct {
	realLease
	open chan struct{}
}

func (l *lateDoneLease) Done() <-chan struct{} { return l.open }

// deafContextLease is a broken lease: the contexts it makes from Background
// are not cancelled by the loss.
type deafContextLease struct{ realLease }

func (l deafContextLease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == context.Background() {
		return context.WithCancel(parent)
	}
	return l.realLease.Context(parent)
}

// forgetfulModel is a broken specification: End after a loss forgets the
// loss.
var forgetfulModel = func() porcupine.Model {
	m := linModel
	m.Step = func(state, input, output any) (bool, any) {
		s, in := state.(linState), input.(linInput)
		if in.Kind == opEnd && s.Phase == model.Lost {
			s.Phase = model.Ended
			return output.(linOutput).OK, s
		}
		return linStep(state, input, output)
	}
	return m
}()

// TestLinearizabilityCheckerRejects shows that the check can fail: broken
// leases checked against the model, and the real lease checked against a
// broken model, each give a history that porcupine rejects, where the real
// lease against the model passes.
func TestLinearizabilityCheckerRejects(t *testing.T) {
	tests := []struct {
		name   string
		lease  leaseUnderTest
		model  porcupine.Model
		wantOK bool
	}{
		{
			// The control: the same calls on the real lease pass.
			name:   "real lease",
			lease:  newRealLease("orders"),
			model:  linModel,
			wantOK: true,
		},
		{
			name:  "second Lose overwrites the cause",
			lease: &overwritingLease{realLease: newRealLease("orders")},
			model: linModel,
		},
		{
			name:  "Err reports the loss before Done is closed",
			lease: &lateDoneLease{realLease: newRealLease("orders"), open: make(chan struct{})},
			model: linModel,
		},
		{
			name:  "model where End forgets the loss",
			lease: newRealLease("orders"),
			model: forgetfulModel,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Two recordings of one client each, one after the other, so
			// the history is sequential and its outcome does not depend on
			// scheduling: client 0 loses the lease with no cause; then
			// client 1 loses it with its own cause, ends it, and reads it.
			history, err := record(tt.lease, [][]linOp{{{Kind: opLose}}})
			if err != nil {
				t.Fatal(err)
			}
			more, err := record(tt.lease, [][]linOp{nil, {{Kind: opLose}, {Kind: opEnd}, {Kind: opErr}, {Kind: opDone}}})
			if err != nil {
				t.Fatal(err)
			}
			// The second recording restarts the clock: put it after the first.
			last := history[len(history)-1].Return
			for _, op := range more {
				op.Call += last
				op.Return += last
				history = append(history, op)
			}
			ok, vis, err := checkHistory(tt.model, history)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantOK {
				t.Fatalf("porcupine's verdict: linearizable = %v, want %v", ok, tt.wantOK)
			}
			if ok {
				return
			}
			if st, err := os.Stat(vis); err != nil {
				t.Errorf("visualization: %v", err)
			} else if st.Size() == 0 {
				t.Errorf("visualization %s is empty", vis)
			}
			os.Remove(vis)
		})
	}
}

// TestLinearizableCatchesBrokenLeases runs the random histories of
// TestLinearizableContexts on the broken leases: the check (porcupine's, or
// record's own on the contexts) must reject one of them within 200
// histories. About one history in four shows each fault, so a
// miss by chance has odds below 1 in 10^25.
func TestLinearizableCatchesBrokenLeases(t *testing.T) {
	broken := map[string]func() leaseUnderTest{
		"a context misses the loss": func() leaseUnderTest {
			l := newRealLease("orders")
			controller.Spread(l.Controller)
			return deafContextLease{l}
		},
		"second Lose overwrites the cause": func() leaseUnderTest {
			return &overwritingLease{realLease: newRealLease("orders")}
		},
		"Err reports the loss before Done is closed": func() leaseUnderTest {
			return &lateDoneLease{realLease: newRealLease("orders"), open: make(chan struct{})}
		},
	}
	for name, newLease := range broken {
		t.Run(name, func(t *testing.T) {
			seed := rand.Uint64()
			r := rand.New(rand.NewPCG(seed, 0))
			for h := range 200 {
				history, err := record(newLease(), scriptContexts(r))
				if err != nil {
					// record's own checks caught the broken lease.
					t.Logf("history %d rejected: %v", h, err)
					return
				}
				ok, vis, err := checkHistory(linModel, history)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					t.Logf("history %d rejected", h)
					os.Remove(vis)
					return
				}
			}
			t.Fatalf("200 histories of a broken lease passed (seed %d)", seed)
		})
	}
}
