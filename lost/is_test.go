package lost_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/lost"
)

// A loss is not a cancellation: an Error matches context.Canceled only when
// the issuer's cause does (docs/adr/0003).
func TestErrorIsNotCanceled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error
		want  bool
	}{
		{"no cause", nil, false},
		{"a cause of the issuer", errClaimRefused, false},
		{"the issuer's cause is a cancellation", context.Canceled, true},
		{"the issuer's cause wraps one", fmt.Errorf("the issuer stopped: %w", context.Canceled), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lost.New("orders", tc.cause)
			if got := errors.Is(err, context.Canceled); got != tc.want {
				t.Errorf("errors.Is(%v, context.Canceled) = %v, want %v", err, got, tc.want)
			}
		})
	}
}

// What a holder gets from net/http when a loss cuts its request through
// Signal.Context, measured on the Go it runs on. net/http (since Go 1.23)
// returns the context's cause: the *lost.Error, wrapped in a *url.Error by
// Client.Do, as it is from Body.Read. errors.As finds the loss in every
// case; errors.Is(err, context.Canceled) does not hold, while ctx.Err() is
// context.Canceled and context.Cause(ctx) is the loss. See docs/adr/0003.
func TestHTTPCutByLoss(t *testing.T) {
	handling := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("first rows"))
			w.(http.Flusher).Flush()
		}
		handling <- struct{}{}
		select {
		case <-r.Context().Done(): // the holder's request was cut
		case <-time.After(time.Minute): // guards against a hang only
		}
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name string
		// call makes the request with ctx, losing the lease with lose at the
		// point the case is about, and returns the error the holder sees.
		call func(ctx context.Context, lose func()) error
	}{
		{"lost before the request", func(ctx context.Context, lose func()) error {
			lose()
			return getThen(ctx, srv, "/headers", nil)
		}},
		{"lost while waiting for the response", func(ctx context.Context, lose func()) error {
			go func() { <-handling; lose() }()
			return getThen(ctx, srv, "/headers", nil)
		}},
		{"lost while reading the body", func(ctx context.Context, lose func()) error {
			return getThen(ctx, srv, "/body", func() { <-handling; lose() })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := controller.New("orders")
			sig := c.Signal()
			ctx, cancel := sig.Context(context.Background())
			defer cancel()

			err := tc.call(ctx, func() { c.Lose(errClaimRefused) })
			t.Logf("the holder got %T: %v", err, err)
			if err == nil {
				t.Fatalf("request cut by a loss returned no error")
			}

			var le *lost.Error
			if !errors.As(err, &le) {
				t.Fatalf("errors.As(%v, *lost.Error) = false, want true", err)
			}
			if le != sig.Err() {
				t.Errorf("errors.As found %p, want the signal's error %p", le, sig.Err())
			}
			if !errors.Is(err, errClaimRefused) {
				t.Errorf("errors.Is(err, the issuer's cause) = false, want true")
			}
			// The measured outcome the ADR rests on: if a Go release makes
			// it true, the ADR needs a second look.
			if errors.Is(err, context.Canceled) {
				t.Errorf("errors.Is(err, context.Canceled) = true, want false: net/http no longer reports the cause alone")
			}
			// The idiom for "was my work cut, for any reason": ask the context.
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("ctx.Err() = %v, want context.Canceled", ctx.Err())
			}
			if cause := context.Cause(ctx); cause != sig.Err() {
				t.Errorf("context.Cause(ctx) = %v, want the signal's error", cause)
			}
		})
	}
}

// getThen gets path and reads the body, calling beforeBody, if not nil,
// once the response has arrived and before its body is read.
func getThen(ctx context.Context, srv *httptest.Server, path string, beforeBody func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if beforeBody != nil {
		beforeBody()
	}
	_, err = io.ReadAll(resp.Body)
	return err
}
