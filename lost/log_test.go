package lost_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/zukhruf/lease/lost"
)

var errClaimRefused = errors.New("the coordinator refused the claim")

// noTime drops the time attribute, so that a handler's output is the same
// on every run.
func noTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// An Error logs as a group: subject always, cause when there is one.
func TestErrorLogValue(t *testing.T) {
	var _ slog.LogValuer = (*lost.Error)(nil)

	for _, tc := range []struct {
		name string
		err  *lost.Error
		text string // what slog's text handler writes for the attribute "err"
		json string // and its JSON handler
	}{
		{
			name: "subject and cause",
			err:  lost.New("orders", errClaimRefused),
			text: `err.subject=orders err.cause="the coordinator refused the claim"`,
			json: `"err":{"subject":"orders","cause":"the coordinator refused the claim"}`,
		},
		{
			name: "no cause",
			err:  lost.New("orders", nil),
			text: `err.subject=orders`,
			json: `"err":{"subject":"orders"}`,
		},
		{
			name: "empty subject",
			err:  lost.New("", errClaimRefused),
			text: `err.subject="" err.cause="the coordinator refused the claim"`,
			json: `"err":{"subject":"","cause":"the coordinator refused the claim"}`,
		},
		{
			name: "cause that wraps",
			err:  lost.New("leader/shard-7", fmt.Errorf("session 7 expired: %w", errClaimRefused)),
			text: `err.subject=leader/shard-7 err.cause="session 7 expired: the coordinator refused the claim"`,
			json: `"err":{"subject":"leader/shard-7","cause":"session 7 expired: the coordinator refused the claim"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.err.LogValue()
			if v.Kind() != slog.KindGroup {
				t.Fatalf("LogValue().Kind() = %v, want %v", v.Kind(), slog.KindGroup)
			}
			attrs := v.Group()
			if len(attrs) == 0 || attrs[0].Key != "subject" || attrs[0].Value.String() != tc.err.Subject() {
				t.Errorf("LogValue() = %v, want subject=%q first", attrs, tc.err.Subject())
			}
			if (len(attrs) == 2) != (tc.err.Unwrap() != nil) {
				t.Errorf("LogValue() = %v, want a cause attribute exactly when Unwrap() = %v is not nil", attrs, tc.err.Unwrap())
			}

			var text, json bytes.Buffer
			opts := &slog.HandlerOptions{ReplaceAttr: noTime}
			slog.New(slog.NewTextHandler(&text, opts)).Info("stopped", "err", tc.err)
			slog.New(slog.NewJSONHandler(&json, opts)).Info("stopped", "err", tc.err)
			if got, want := text.String(), "level=INFO msg=stopped "+tc.text+"\n"; got != want {
				t.Errorf("text handler wrote %q, want %q", got, want)
			}
			if got, want := json.String(), `{"level":"INFO","msg":"stopped",`+tc.json+"}\n"; got != want {
				t.Errorf("JSON handler wrote %q, want %q", got, want)
			}
		})
	}
}

// slog calls LogValue only on the value it is given: a wrapped Error logs as
// its message. A holder that wants the attributes logs what errors.As finds.
func TestErrorLogValueWrapped(t *testing.T) {
	err := fmt.Errorf("copy rows: batch 3: %w", lost.New("orders", errClaimRefused))
	opts := &slog.HandlerOptions{ReplaceAttr: noTime}

	var wrapped bytes.Buffer
	slog.New(slog.NewTextHandler(&wrapped, opts)).Info("stopped", "err", err)
	if got, want := wrapped.String(), `level=INFO msg=stopped err="copy rows: batch 3: lease lost: orders: the coordinator refused the claim"`+"\n"; got != want {
		t.Errorf("wrapped Error logged as %q, want %q", got, want)
	}

	var le *lost.Error
	if !errors.As(err, &le) {
		t.Fatalf("errors.As(%v) = false, want true", err)
	}
	var found bytes.Buffer
	slog.New(slog.NewTextHandler(&found, opts)).Info("stopped", "err", le)
	if got, want := found.String(), `level=INFO msg=stopped err.subject=orders err.cause="the coordinator refused the claim"`+"\n"; got != want {
		t.Errorf("Error found by errors.As logged as %q, want %q", got, want)
	}
}
