// Package history reads and writes the history of a lock-set run: one JSON
// object a line, each an event of one process on one lock, stamped on the
// machine's one monotonic clock (CLOCK_MONOTONIC, which every process of
// the machine reads alike, so the harness and its client processes share
// it). The format is fixed; other tools read it:
//
//	{"t": 1234, "p": "lease-3", "lock": "a", "f": "acquire", "type": "ok", "token": 7}
//
// f is acquire, release, lost, write or store; type is invoke, ok, fail or
// info (an outcome not known, such as an acquire cut by its timeout). lost
// is the moment the process's signal reported the loss; a write's invoke is
// sent by the process, its ok (the fenced register accepted it) or fail
// (refused) is stamped by the register when it applies the write. store is
// the same write sent through a fence of package fencing to a real store
// (a run's -register), stamped by the process: its invoke before it sends
// it, its ok (accepted), fail (refused as stale) or info (an error that
// leaves the outcome unknown) when the store answers.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
)

// Functions and types of events.
const (
	Acquire = "acquire"
	Release = "release"
	Lost    = "lost"
	Write   = "write"
	Store   = "store"

	Invoke = "invoke"
	OK     = "ok"
	Fail   = "fail"
	Info   = "info"
)

// An Event is one line of a history.
type Event struct {
	T     int64  `json:"t"`
	P     string `json:"p"`
	Lock  string `json:"lock"`
	F     string `json:"f"`
	Type  string `json:"type"`
	Token int64  `json:"token"`
	Value any    `json:"value,omitempty"`
}

// Valid reports what is wrong with e, or nil.
func (e Event) Valid() error {
	switch e.F {
	case Acquire, Release, Lost, Write, Store:
	default:
		return fmt.Errorf("f %q is not acquire, release, lost, write or store", e.F)
	}
	switch e.Type {
	case Invoke, OK, Fail, Info:
	default:
		return fmt.Errorf("type %q is not invoke, ok, fail or info", e.Type)
	}
	if e.P == "" || e.Lock == "" {
		return fmt.Errorf("an event without a process or a lock")
	}
	return nil
}

// A Writer writes events as lines; it is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

// NewWriter returns a Writer that writes to w; Flush writes what it holds.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Write writes e as one line.
func (w *Writer) Write(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	b = append(b, '\n')
	_, w.err = w.w.Write(b)
	return w.err
}

// Flush writes out the buffered lines.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.err = w.w.Flush()
	return w.err
}

// Read reads a history, and returns its events sorted by time (stably: the
// order of two events of one time is the file's).
func Read(r io.Reader) ([]Event, error) {
	var events []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("history: line %d: %w", line, err)
		}
		if err := e.Valid(); err != nil {
			return nil, fmt.Errorf("history: line %d: %w", line, err)
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].T < events[j].T })
	return events, nil
}
