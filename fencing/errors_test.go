package fencing_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/zukhruf/lease/fencing"
)

func TestStaleErrorMatches(t *testing.T) {
	err := fmt.Errorf("write batch 3: %w", &fencing.StaleError{Resource: "invoice-42", Token: 4, Current: 7})
	if !errors.Is(err, fencing.ErrStale) {
		t.Errorf("errors.Is(%v, ErrStale) = false, want true", err)
	}
	var se *fencing.StaleError
	if !errors.As(err, &se) || se.Token != 4 || se.Current != 7 || se.Resource != "invoice-42" {
		t.Errorf("errors.As(%v) = %+v, want invoice-42, 4, 7", err, se)
	}
	if errors.Is(errors.New("other"), fencing.ErrStale) {
		t.Error("errors.Is(other, ErrStale) = true, want false")
	}
	want := `fencing: stale token 4 for resource "invoice-42": token 7 was accepted`
	if got := se.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
