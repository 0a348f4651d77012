package fencing

import (
	"context"
	"sync"
)

// Memory is an in-process [Fence]: for each resource, the highest token it
// accepted, kept for the life of the Memory. It fences the writes of one
// process, such as those that a server behind [Handler] makes to its own
// state.
//
// The zero Memory is ready, with no fence raised. A Memory is safe for use
// by many goroutines at once and must not be copied after first use.
//
// The writes to one resource run one at a time, each under its check: a
// slow write delays the next one on its resource, and no write on another
// resource.
type Memory struct {
	_  noCopy
	mu sync.Mutex
	m  map[string]*memoryFence
}

// memoryFence is one resource's fence; sem, a one-slot semaphore, is held
// by the Do that checks and writes.
type memoryFence struct {
	sem   chan struct{}
	token int64
	set   bool
}

func (m *Memory) fence(resource string) *memoryFence {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = make(map[string]*memoryFence)
	}
	f, ok := m.m[resource]
	if !ok {
		f = &memoryFence{sem: make(chan struct{}, 1)}
		m.m[resource] = f
	}
	return f
}

// Do implements [Fence]: it runs write under resource's fence. While it
// waits for an earlier Do on resource, a ctx that ends makes it return
// ctx's error without running write.
func (m *Memory) Do(ctx context.Context, resource string, token int64, write func(context.Context) error) error {
	f := m.fence(resource)
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-f.sem }()
	if f.set && token < f.token {
		return &StaleError{Resource: resource, Token: token, Current: f.token}
	}
	if write != nil {
		if err := write(ctx); err != nil {
			return err
		}
	}
	f.token, f.set = token, true
	return nil
}

// Advance raises resource's fence to token without a write, or returns an
// error wrapping a *[StaleError] when a higher token was accepted: the call
// a new holder makes right after Lock, so that every older holder's write
// is refused from then on.
func (m *Memory) Advance(ctx context.Context, resource string, token int64) error {
	return m.Do(ctx, resource, token, nil)
}

// Token returns the highest token resource accepted, and false if none
// was.
func (m *Memory) Token(resource string) (int64, bool) {
	f := m.fence(resource)
	f.sem <- struct{}{}
	defer func() { <-f.sem }()
	return f.token, f.set
}

// noCopy makes go vet report a copy of the struct that holds it.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}
