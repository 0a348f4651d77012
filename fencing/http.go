package fencing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// The headers that carry a request's fence.
const (
	// TokenHeader carries the request's fencing token, a decimal int64.
	TokenHeader = "Fencing-Token"
	// ResourceHeader names the fenced resource; a request without it is
	// fenced on its URL's path.
	ResourceHeader = "Fencing-Resource"
	// CurrentHeader, on a 409 answer, carries the highest token the
	// resource accepted.
	CurrentHeader = "Fencing-Current"
)

type tokenKey struct{}

type tokenValue struct {
	resource string
	token    int64
}

// WithToken returns a copy of ctx that carries token for resource: the
// requests that [Transport] sends under it carry them in their headers.
func WithToken(ctx context.Context, resource string, token int64) context.Context {
	return context.WithValue(ctx, tokenKey{}, tokenValue{resource, token})
}

// TokenFrom returns the resource and token that ctx carries, and false if
// it carries none.
func TokenFrom(ctx context.Context) (resource string, token int64, ok bool) {
	v, ok := ctx.Value(tokenKey{}).(tokenValue)
	return v.resource, v.token, ok
}

// Transport is an [http.RoundTripper] that sets the Fencing-Token and
// Fencing-Resource headers of each request whose context carries a token
// ([WithToken]); it sends other requests as they are. The zero Transport
// sends through [http.DefaultTransport].
type Transport struct {
	Base http.RoundTripper // nil means http.DefaultTransport
}

// RoundTrip implements [http.RoundTripper]. It does not read the answer:
// [StaleResponse] turns a refusal into an error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resource, token, ok := TokenFrom(req.Context())
	if !ok {
		return base.RoundTrip(req)
	}
	r := req.Clone(req.Context()) // a RoundTripper must not modify the request
	r.Header.Set(TokenHeader, strconv.FormatInt(token, 10))
	if resource != "" {
		r.Header.Set(ResourceHeader, resource)
	}
	return base.RoundTrip(r)
}

// StaleResponse returns a *[StaleError] if resp is a [Handler]'s refusal
// (409 Conflict with a Fencing-Current header), and nil otherwise. The
// refusal names the resource and both tokens in its headers. It does
// not read or close the body.
func StaleResponse(resp *http.Response) error {
	if resp == nil || resp.StatusCode != http.StatusConflict {
		return nil
	}
	current, err := strconv.ParseInt(resp.Header.Get(CurrentHeader), 10, 64)
	if err != nil {
		return nil
	}
	token, _ := strconv.ParseInt(resp.Header.Get(TokenHeader), 10, 64)
	return &StaleError{Resource: resp.Header.Get(ResourceHeader), Token: token, Current: current}
}

func resource(r *http.Request) string {
	if res := r.Header.Get(ResourceHeader); res != "" {
		return res
	}
	return r.URL.Path
}

// Handler returns a handler that fences the requests to next in f: a
// request with a Fencing-Token header runs next under its resource's fence
// ([Fence.Do]), which next's answer raises unless its status is 400 or
// more; one with a lower token than its resource accepted is answered 409
// Conflict, with the Fencing-Current, Fencing-Token and Fencing-Resource
// headers and a body naming both tokens,
// and never reaches next. A GET, HEAD or OPTIONS request without the
// header reaches next unfenced; any other is answered 428 Precondition
// Required, and a header that is not a decimal int64 400 Bad Request.
//
// The requests to one resource run next one at a time when f is a
// [Memory]: the check and the write are one step.
func Handler(f Fence, next http.Handler) http.Handler {
	if f == nil || next == nil {
		panic("fencing: Handler called with a nil Fence or handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get(TokenHeader)
		if h == "" {
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
				next.ServeHTTP(w, r)
			default:
				http.Error(w, "fencing: "+r.Method+" request without a "+TokenHeader+" header", http.StatusPreconditionRequired)
			}
			return
		}
		token, err := strconv.ParseInt(h, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("fencing: %s header %q is not a decimal int64", TokenHeader, h), http.StatusBadRequest)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		err = f.Do(r.Context(), resource(r), token, func(context.Context) error {
			next.ServeHTTP(sw, r)
			if sw.status >= 400 {
				return errNotRaised
			}
			return nil
		})
		var stale *StaleError
		switch {
		case errors.As(err, &stale):
			w.Header().Set(CurrentHeader, strconv.FormatInt(stale.Current, 10))
			w.Header().Set(TokenHeader, strconv.FormatInt(stale.Token, 10))
			w.Header().Set(ResourceHeader, stale.Resource)
			http.Error(w, stale.Error(), http.StatusConflict)
		case err != nil && !errors.Is(err, errNotRaised) && sw.status == 0:
			http.Error(w, err.Error(), http.StatusServiceUnavailable) // the fence's own failure; next did not answer
		}
	})
}

// errNotRaised tells Do that next answered with an error status: the fence
// stays where it was.
var errNotRaised = errors.New("fencing: the handler answered an error")

// statusWriter records the status that next answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets [http.ResponseController] reach the writer's other methods.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
