package singleflight_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/zukhruf/lease/issuers/singleflight"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

// propFlight is one flight of a property run and what the model knows of it.
type propFlight struct {
	id      int
	key     string
	ctx     context.Context
	sig     *signal.Signal
	release chan struct{}
	callers []<-chan singleflight.Result[int] // from DoChan, the first caller's first

	lateLive  int   // flights of its key whose lease was live when fn started
	forgotten bool  // Forget found it running: the model says lost
	returned  bool  // fn returned and every caller got the result
	lostErr   error // the first loss seen, which must never change
}

// propGroup runs random Do, Forget and return schedules against a model that
// knows, for each key, which flight the Group holds: x/sync's rules.
type propGroup struct {
	g       singleflight.Group[int]
	keys    []string
	flights []*propFlight
	current map[string]*propFlight
	started chan *propFlight
	stray   chan string // a caller the model had join a flight ran fn
}

func newPropGroup() *propGroup {
	return &propGroup{
		keys:    []string{"a", "b"},
		current: make(map[string]*propFlight),
		started: make(chan *propFlight, 1),
		stray:   make(chan string, 100),
	}
}

func (p *propGroup) running() []*propFlight {
	var r []*propFlight
	for _, f := range p.flights {
		if !f.returned {
			r = append(r, f)
		}
	}
	return r
}

func (p *propGroup) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"Do": func(t *rapid.T) {
			key := rapid.SampledFrom(p.keys).Draw(t, "key")
			if f := p.current[key]; f != nil {
				f.callers = append(f.callers, p.g.DoChan(context.Background(), key, func(context.Context, *signal.Signal) (int, error) {
					p.stray <- key
					return -1, nil
				}))
				return
			}
			// The flights of key still running: each must have lost its
			// lease by the time the new flight's fn runs.
			var prior []*signal.Signal
			for _, f := range p.running() {
				if f.key == key {
					prior = append(prior, f.sig)
				}
			}
			id := len(p.flights)
			ch := p.g.DoChan(context.Background(), key, func(ctx context.Context, sig *signal.Signal) (int, error) {
				f := &propFlight{id: id, key: key, ctx: ctx, sig: sig, release: make(chan struct{})}
				for _, s := range prior {
					if s.Err() == nil {
						f.lateLive++
					}
				}
				p.started <- f
				<-f.release
				return id, sig.Err()
			})
			var f *propFlight
			select {
			case f = <-p.started:
			case <-time.After(hangGuard):
				t.Fatalf("Do(%q) found no flight, yet fn did not run", key)
			}
			f.callers = []<-chan singleflight.Result[int]{ch}
			p.flights = append(p.flights, f)
			p.current[key] = f
		},
		"Forget": func(t *rapid.T) {
			key := rapid.SampledFrom(p.keys).Draw(t, "key")
			p.g.Forget(key)
			if f := p.current[key]; f != nil {
				f.forgotten = true
				delete(p.current, key)
			}
		},
		"Return": func(t *rapid.T) {
			running := p.running()
			if len(running) == 0 {
				t.Skip("no flight runs")
			}
			f := rapid.SampledFrom(running).Draw(t, "flight")
			p.ret(t, f)
		},
		"": p.check,
	}
}

// ret makes f's fn return and checks what each of its callers gets.
func (p *propGroup) ret(t *rapid.T, f *propFlight) {
	close(f.release)
	for i, ch := range f.callers {
		var r singleflight.Result[int]
		select {
		case r = <-ch:
		case <-time.After(hangGuard):
			t.Fatalf("flight %d returned; caller %d got nothing", f.id, i)
		}
		if r.Val != f.id || r.Shared != (len(f.callers) > 1) {
			t.Fatalf("caller %d of flight %d got %+v, want Val %d, Shared %v", i, f.id, r, f.id, len(f.callers) > 1)
		}
		if f.forgotten {
			if r.Err == nil || r.Err != f.sig.Err() {
				t.Fatalf("caller %d of forgotten flight %d got error %v, want its loss", i, f.id, r.Err)
			}
		} else if r.Err != nil {
			t.Fatalf("caller %d of flight %d got error %v, want nil: never forgotten", i, f.id, r.Err)
		}
	}
	f.returned = true
	if p.current[f.key] == f {
		delete(p.current, f.key)
	}
}

// check holds after every step: at most one live lease per key, the one of
// the flight the Group holds; a lease is lost if and only if its flight was
// forgotten while it ran, once, with ErrForgotten, and its context with it;
// the Group holds the flights the model does, with their callers.
func (p *propGroup) check(t *rapid.T) {
	select {
	case key := <-p.stray:
		t.Fatalf("a caller of %q that should have joined a flight ran fn", key)
	default:
	}
	live := make(map[string]int)
	for _, f := range p.flights {
		if f.lateLive > 0 {
			t.Fatalf("flight %d started while %d earlier flights of %q held a live lease", f.id, f.lateLive, f.key)
		}
		err := f.sig.Err()
		switch {
		case !f.forgotten && err != nil:
			t.Fatalf("flight %d was never forgotten while it ran, yet sig.Err() = %v", f.id, err)
		case f.forgotten && err == nil:
			t.Fatalf("flight %d was forgotten, yet sig.Err() = nil", f.id)
		case f.forgotten:
			var le *lost.Error
			if !errors.As(err, &le) || le.Subject() != f.key || !errors.Is(err, singleflight.ErrForgotten) {
				t.Fatalf("flight %d: sig.Err() = %v, want a loss of %q by ErrForgotten", f.id, err, f.key)
			}
			if f.lostErr == nil {
				f.lostErr = err
			} else if err != f.lostErr {
				t.Fatalf("flight %d: sig.Err() = %v, was %v: lost twice", f.id, err, f.lostErr)
			}
		}
		st := state(f.sig)
		if f.returned {
			if want := map[bool]string{false: "ended", true: "lost"}[f.forgotten]; st != want {
				t.Fatalf("flight %d returned, forgotten %v: its lease is %s, want %s", f.id, f.forgotten, st, want)
			}
			continue
		}
		if ctxDone := f.ctx.Err() != nil; ctxDone != f.forgotten {
			t.Fatalf("flight %d: ctx.Err() = %v, forgotten %v", f.id, f.ctx.Err(), f.forgotten)
		}
		if st == "live" {
			live[f.key]++
			if p.current[f.key] != f {
				t.Fatalf("flight %d of %q holds a live lease, but the Group holds another flight", f.id, f.key)
			}
		}
	}
	for _, key := range p.keys {
		if live[key] > 1 {
			t.Fatalf("%d flights of %q hold a live lease", live[key], key)
		}
		dups, ok := p.g.Dups(key)
		f := p.current[key]
		if ok != (f != nil) || (f != nil && dups != len(f.callers)-1) {
			t.Fatalf("the Group holds a flight for %q: %v with %d callers joined; the model: %v", key, ok, dups, f)
		}
	}
}

// state returns the state of sig's lease as its String prints it,
// signal.Signal("key", live), without the cause: live, lost or ended.
func state(sig *signal.Signal) string {
	_, s, _ := strings.Cut(sig.String(), `", `)
	s = strings.TrimSuffix(s, ")")
	s, _, _ = strings.Cut(s, ":")
	return s
}

// finish lets every flight still running return, so that no goroutine
// outlives the run.
func (p *propGroup) finish(t *rapid.T) {
	for _, f := range p.running() {
		p.ret(t, f)
	}
	p.check(t)
}

// TestProperty: over random schedules of Do, Forget and the return of
// flights, on two keys, at most one flight per key holds a live lease at
// every step, and the Group keeps x/sync's rules.
func TestProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := newPropGroup()
		t.Repeat(p.actions())
		p.finish(t)
	})
}
