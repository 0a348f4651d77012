package fencing

import (
	"errors"
	"fmt"
)

// ErrStale is the error that a refused write wraps:
// errors.Is(err, fencing.ErrStale). The write was certainly not applied.
var ErrStale = errors.New("fencing: stale token")

// StaleError is the error of a write refused because the resource accepted
// a higher token than the write's.
type StaleError struct {
	Resource string // the fenced resource
	Token    int64  // the refused write's token
	Current  int64  // the highest token the resource accepted, as read at the refusal
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fencing: stale token %d for resource %q: token %d was accepted", e.Token, e.Resource, e.Current)
}

// Is reports whether target is [ErrStale].
func (e *StaleError) Is(target error) bool { return target == ErrStale }
