package singleflight_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/issuers/singleflight"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

// events is an Observer that keeps the kinds it is told of, in order.
type events struct {
	mu  sync.Mutex
	all []health.Event
}

func (e *events) Observe(ev health.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) kinds() []health.Kind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var k []health.Kind
	for _, ev := range e.all {
		k = append(k, ev.Kind)
	}
	return k
}

func TestObserverReleased(t *testing.T) {
	var ev events
	g := singleflight.Group[int]{Observer: &ev}
	g.Do(context.Background(), "key", func(context.Context, *signal.Signal) (int, error) { return 1, nil })
	if got, want := ev.kinds(), []health.Kind{health.Granted, health.Released}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	if ev.all[0].Subject != "key" || ev.all[0].Issuer != "singleflight" {
		t.Errorf("granted = %+v, want subject key of singleflight", ev.all[0])
	}
}

func TestObserverLostOnForget(t *testing.T) {
	var ev events
	g := singleflight.Group[int]{Observer: &ev}
	f, ch := start(t, &g, context.Background(), "key")
	g.Forget("key")
	f.release <- 1
	<-ch
	if got, want := ev.kinds(), []health.Kind{health.Granted, health.Lost}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	loss := ev.all[1]
	var le *lost.Error
	if !errors.As(loss.Err, &le) || !errors.Is(loss.Err, singleflight.ErrForgotten) || loss.Via != health.Push {
		t.Errorf("lost = %v via %v, want a *lost.Error of ErrForgotten via push", loss.Err, loss.Via)
	}
}
