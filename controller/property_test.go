package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/internal/model"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

// hangGuard bounds every wait in these tests. It only keeps a broken lease
// from hanging the run; no test measures time against it.
const hangGuard = 10 * time.Second

// propCauses are the causes the tests lose leases with; model.Cause(i) stands
// for propCauses[i], and model.NoCause for Lose(nil).
var propCauses = []error{
	nil,
	errors.New("the coordinator refused the claim"),
	errors.New("session expired"),
	context.DeadlineExceeded,
}

// causeOf returns the model's number for the cause that err (a *lost.Error)
// wraps, or -1 when it wraps none of propCauses.
func causeOf(err *lost.Error) model.Cause {
	cause := err.Unwrap()
	for i, c := range propCauses {
		if c == cause {
			return model.Cause(i)
		}
	}
	return -1
}

// propParent is a live parent for contexts, as a request's context is: never
// done while the property runs.
var propParent, _ = context.WithCancel(context.WithValue(context.Background(), propKey{}, "request"))

type propKey struct{}

// registration is one AfterLoss callback or one derived Context of a run.
type registration struct {
	isContext bool

	// AfterLoss
	runs atomic.Int32
	ran  chan struct{} // closed by the first run
	stop func() bool

	// Context
	ctx      context.Context
	cancel   context.CancelFunc
	canceled bool // cancel was called
}

func (r *registration) callback() {
	if r.runs.Add(1) == 1 {
		close(r.ran)
	}
}

// observation is what a holder and an issuer can see of a lease, in the
// model's terms, so that cmp.Diff can set it beside the model's.
type observation struct {
	State string      // the state String prints: live, lost or ended
	Lost  bool        // Err returned a *lost.Error
	Cause model.Cause // what that error wraps
	Done  string      // "closed", "open", or "not asked" while no one called Done
	Regs  []string    // per registration: ran, not run; or for a context: lost, canceled, live
}

// propLease runs one controller beside the model.
type propLease struct {
	subject string
	c       *controller.Controller
	m       model.Lease
	regs    []*registration
	done    <-chan struct{} // the first Done channel, once asked
	lostErr error           // the first non-nil Err
}

func newPropLease(t *rapid.T) *propLease {
	subject := rapid.SampledFrom([]string{"", "orders", "shard/7"}).Draw(t, "subject")
	p := &propLease{subject: subject}
	if subject == "" && rapid.Bool().Draw(t, "zero") {
		p.c = new(controller.Controller) // the zero Controller is a lease on ""
	} else {
		p.c = controller.New(subject)
	}
	// Half the leases run with the registry's set of shards from the
	// start, as the first contention between registrations gives it.
	if rapid.Bool().Draw(t, "spread") {
		controller.Spread(p.c)
	}
	return p
}

func (p *propLease) sig() *signal.Signal { return p.c.Signal() }

func (p *propLease) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"Lose": func(t *rapid.T) {
			i := rapid.IntRange(0, len(propCauses)-1).Draw(t, "cause")
			if got, want := p.c.Lose(propCauses[i]), p.m.Lose(model.Cause(i)); got != want {
				t.Fatalf("Lose(%v) = %v, want %v", propCauses[i], got, want)
			}
		},
		"End": func(t *rapid.T) {
			if got, want := p.c.End(), p.m.End(); got != want {
				t.Fatalf("End() = %v, want %v", got, want)
			}
		},
		"Err": func(t *rapid.T) {
			err := p.sig().Err()
			if lost, _ := p.m.Err(); !lost {
				if err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				return
			}
			wrapped := fmt.Errorf("copy rows: %w", fmt.Errorf("batch 3: %w", err))
			var le *lost.Error
			if !errors.As(wrapped, &le) || le != err {
				t.Fatalf("errors.As(%v) did not find the *lost.Error", wrapped)
			}
			if c := propCauses[causeOf(le)]; c != nil && !errors.Is(wrapped, c) {
				t.Fatalf("errors.Is(%v, %v) = false, want true", wrapped, c)
			}
		},
		"Done": func(t *rapid.T) {
			d := p.sig().Done()
			if p.done == nil {
				p.done = d
			}
		},
		"AfterLoss": func(t *rapid.T) {
			r := &registration{ran: make(chan struct{})}
			r.stop = p.sig().AfterLoss(r.callback)
			p.regs = append(p.regs, r)
			p.m.AfterLoss()
		},
		"Context": func(t *rapid.T) {
			r := &registration{isContext: true}
			r.ctx, r.cancel = p.sig().Context(context.Background())
			p.regs = append(p.regs, r)
			p.m.AfterLoss()
		},
		// A context made from a live parent, as a request's, which the
		// signal keeps in a registry of its own rather than as a child of
		// its own context; toward the lease it is the same registration.
		"ContextLiveParent": func(t *rapid.T) {
			r := &registration{isContext: true}
			r.ctx, r.cancel = p.sig().Context(propParent)
			p.regs = append(p.regs, r)
			p.m.AfterLoss()
		},
		"Stop": func(t *rapid.T) {
			if len(p.regs) == 0 {
				// Not t.Skip: a fuzzer's input can draw Stop on every step,
				// and rapid fails a run with no valid action.
				return
			}
			i := rapid.IntRange(0, len(p.regs)-1).Draw(t, "registration")
			r := p.regs[i]
			want := p.m.Stop(i)
			if r.isContext {
				// A context's cancel has no result; what it did shows in
				// the context, which the invariant reads.
				r.cancel()
				r.canceled = true
				return
			}
			if got := r.stop(); got != want {
				t.Fatalf("stop() of registration %d = %v, want %v", i, got, want)
			}
		},
		"": p.check,
	}
}

// check is the invariant run after every step: the lease as its users see it
// is the model's lease.
func (p *propLease) check(t *rapid.T) {
	if diff := cmp.Diff(p.want(), p.observe(t)); diff != "" {
		t.Fatalf("lease differs from the model (-model +lease):\n%s", diff)
	}
}

func (p *propLease) want() observation {
	lost, cause := p.m.Err()
	w := observation{State: p.m.Phase.String(), Lost: lost, Done: "not asked"}
	if lost {
		w.Cause = cause
	}
	if p.done != nil {
		w.Done = "open"
		if p.m.DoneClosed() {
			w.Done = "closed"
		}
	}
	for i, r := range p.regs {
		c := p.m.Callbacks[i]
		switch {
		case !r.isContext && c == model.Started:
			w.Regs = append(w.Regs, "ran")
		case !r.isContext:
			w.Regs = append(w.Regs, "not run")
		case c == model.Started:
			w.Regs = append(w.Regs, "lost")
		case r.canceled:
			// Its own cancel cancels a context whatever the lease did,
			// even where the model's stop kept nothing from running.
			w.Regs = append(w.Regs, "canceled")
		default:
			w.Regs = append(w.Regs, "live")
		}
	}
	return w
}

func (p *propLease) observe(t *rapid.T) observation {
	var o observation
	s := p.c.String()
	switch {
	case strings.HasSuffix(s, ", live)"):
		o.State = "live"
	case strings.HasSuffix(s, ", ended)"):
		o.State = "ended"
	case strings.Contains(s, ", lost"):
		o.State = "lost"
	default:
		t.Fatalf("String() = %q: no state in it", s)
	}
	if want := p.sig().String(); strings.TrimPrefix(want, "signal.Signal") != strings.TrimPrefix(s, "controller.Controller") {
		t.Fatalf("Signal().String() = %q, want the state of %q", want, s)
	}

	if err := p.sig().Err(); err != nil {
		var le *lost.Error
		if !errors.As(err, &le) {
			t.Fatalf("Err() = %T %v, want a *lost.Error", err, err)
		}
		if le.Subject() != p.subject {
			t.Fatalf("Err().Subject() = %q, want %q", le.Subject(), p.subject)
		}
		if p.lostErr == nil {
			p.lostErr = err
		} else if err != p.lostErr {
			t.Fatalf("Err() = %p, want the first error value %p", err, p.lostErr)
		}
		o.Lost, o.Cause = true, causeOf(le)
		// Go issue 75533 in context: once Err reports the loss, Done must
		// already be closed, even for a Done asked for only now.
		if !closedNow(p.sig().Done()) {
			t.Fatalf("Err() = %v but Done() is not closed", err)
		}
	}

	o.Done = "not asked"
	if p.done != nil {
		if d := p.sig().Done(); d != p.done {
			t.Fatalf("Done() returned a new channel")
		}
		o.Done = "open"
		if closedNow(p.done) {
			o.Done = "closed"
		}
	}

	for i, r := range p.regs {
		if r.isContext {
			o.Regs = append(o.Regs, contextState(t, r.ctx, p.lostErr))
			continue
		}
		if p.m.Callbacks[i] == model.Started {
			// The loss started it in its own goroutine; give it time to
			// run, bounded only to fail rather than hang.
			select {
			case <-r.ran:
			case <-time.After(hangGuard):
			}
		}
		switch n := r.runs.Load(); n {
		case 0:
			o.Regs = append(o.Regs, "not run")
		case 1:
			o.Regs = append(o.Regs, "ran")
		default:
			o.Regs = append(o.Regs, fmt.Sprintf("ran %d times", n))
		}
	}
	return o
}

// contextState names what a derived context shows: live, lost (cancelled
// with the loss as its cause) or canceled (by its own cancel).
func contextState(t *rapid.T, ctx context.Context, lostErr error) string {
	switch err, cause := ctx.Err(), context.Cause(ctx); {
	case err == nil:
		return "live"
	case err != context.Canceled:
		t.Fatalf("ctx.Err() = %v, want %v", err, context.Canceled)
	case cause == context.Canceled:
		return "canceled"
	case lostErr != nil && cause == lostErr:
		return "lost"
	default:
		t.Fatalf("context.Cause(ctx) = %v, want the loss %v or %v", cause, lostErr, context.Canceled)
	}
	return ""
}

// finish waits for every callback the model started and checks that each
// ran exactly once and that no other ran, then releases the contexts.
func (p *propLease) finish(t *rapid.T) {
	for i, r := range p.regs {
		if r.isContext {
			r.cancel()
			continue
		}
		if p.m.Callbacks[i] == model.Started {
			select {
			case <-r.ran:
			case <-time.After(hangGuard):
				t.Fatalf("callback %d was started by the loss but has not run", i)
			}
		}
	}
	// Every callback that should run has run; any other run would have been
	// started by the same Lose or AfterLoss call, so a stray one shows here.
	for i, r := range p.regs {
		if r.isContext {
			continue
		}
		want := int32(0)
		if p.m.Callbacks[i] == model.Started {
			want = 1
		}
		if got := r.runs.Load(); got != want {
			t.Fatalf("callback %d (%v) ran %d times, want %d", i, p.m.Callbacks[i], got, want)
		}
	}
}

// leaseProperty is the property that TestLeaseProperty checks and FuzzLease
// fuzzes: any sequence of calls leaves the lease as the model says.
func leaseProperty(t *rapid.T) {
	p := newPropLease(t)
	t.Repeat(p.actions())
	p.finish(t)
}

func TestLeaseProperty(t *testing.T) {
	rapid.Check(t, leaseProperty)
}

func closedNow(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
