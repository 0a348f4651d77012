package core

import (
	"errors"
	"testing"
)

// TestSetCause fails if errorFields stops matching lost.Error field for
// field: the size check catches a field added or removed, this an order
// changed.
func TestSetCause(t *testing.T) {
	l := New("orders")
	cause := errors.New("the coordinator refused the claim")
	l.setCause(cause)
	if got := l.err.Subject(); got != "orders" {
		t.Errorf("Subject() after setCause = %q, want %q", got, "orders")
	}
	if got := l.err.Unwrap(); got != cause {
		t.Errorf("Unwrap() after setCause = %v, want %v", got, cause)
	}
}

// TestMergedOnlyByAny: an issuer's subject that reads like the merged
// lease's is an ordinary subject. (mergedSubject itself never leaves the
// package: a merged lease reports its sources' subjects and errors.)
func TestMergedOnlyByAny(t *testing.T) {
	if New("merged").isMerged() {
		t.Error(`New("merged").isMerged() = true, want false`)
	}
	m, release := Any(0, nil)
	defer release()
	if !m.isMerged() {
		t.Error("Any(...).isMerged() = false, want true")
	}
}
