package lost_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/zukhruf/lease/lost"
)

func TestError(t *testing.T) {
	refused := errors.New("the coordinator refused the claim")
	for _, tc := range []struct {
		name    string
		subject string
		cause   error
		msg     string
	}{
		{"subject and cause", "orders", refused, "lease lost: orders: the coordinator refused the claim"},
		{"no cause", "orders", nil, "lease lost: orders"},
		{"no subject", "", refused, "lease lost: the coordinator refused the claim"},
		{"neither", "", nil, "lease lost"},
		{"subject of MaxQuoted bytes", strings.Repeat("a", lost.MaxQuoted), nil, "lease lost: " + strings.Repeat("a", lost.MaxQuoted)},
		{"long subject cut", strings.Repeat("a", 1<<20), refused, "lease lost: " + strings.Repeat("a", lost.MaxQuoted) + "…: the coordinator refused the claim"},
		// "é" is two bytes: a cut inside it would leave invalid UTF-8.
		{"cut at a character's start", "a" + strings.Repeat("é", lost.MaxQuoted), nil, "lease lost: a" + strings.Repeat("é", lost.MaxQuoted/2-1) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := lost.New(tc.subject, tc.cause)
			if got := e.Error(); got != tc.msg {
				t.Errorf("Error() = %q, want %q", got, tc.msg)
			}
			if got := e.Subject(); got != tc.subject {
				t.Errorf("Subject() = %q, want %q", got, tc.subject)
			}
			if got := e.Unwrap(); got != tc.cause {
				t.Errorf("Unwrap() = %v, want %v", got, tc.cause)
			}
		})
	}
}

func TestErrorMatching(t *testing.T) {
	cause := fmt.Errorf("etcd: %w", context.DeadlineExceeded)
	e := lost.New("orders", cause)
	wrapped := fmt.Errorf("write batch: %w", fmt.Errorf("copy rows: %w", e))

	var got *lost.Error
	if !errors.As(wrapped, &got) || got != e {
		t.Errorf("errors.As(wrapped, *lost.Error) found %v, want %v", got, e)
	}
	if !errors.Is(wrapped, e) {
		t.Error("errors.Is(wrapped, e) = false, want true")
	}
	if !errors.Is(wrapped, context.DeadlineExceeded) {
		t.Error("errors.Is(wrapped, the cause's own cause) = false, want true")
	}
	if errors.Is(wrapped, lost.New("orders", cause)) {
		t.Error("errors.Is matched a different *lost.Error with the same fields; errors are matched by identity")
	}
	if errors.As(fmt.Errorf("no loss: %w", cause), &got) {
		t.Error("errors.As found a *lost.Error in an error that has none")
	}
}
