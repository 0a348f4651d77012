package fencing_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zukhruf/lease/fencing"
)

// fencedServer is a server whose handler records each fenced write, behind
// a Handler over a Memory.
func fencedServer(t *testing.T, status int) (*httptest.Server, *[]string) {
	t.Helper()
	var writes []string
	var m fencing.Memory
	srv := httptest.NewServer(fencing.Handler(&m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			writes = append(writes, r.Header.Get(fencing.ResourceHeader)+"@"+r.Header.Get(fencing.TokenHeader))
		}
		w.WriteHeader(status)
	})))
	t.Cleanup(srv.Close)
	return srv, &writes
}

func send(t *testing.T, c *http.Client, ctx context.Context, method, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader("row"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestHandlerRefusesStaleRequest(t *testing.T) {
	srv, writes := fencedServer(t, http.StatusNoContent)
	c := &http.Client{Transport: &fencing.Transport{}}
	ctx := context.Background()
	for _, tok := range []int64{3, 5, 5} {
		if resp, body := send(t, c, fencing.WithToken(ctx, "invoice-42", tok), http.MethodPut, srv.URL+"/rows"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("PUT with token %d: %s %s, want 204", tok, resp.Status, body)
		}
	}
	resp, body := send(t, c, fencing.WithToken(ctx, "invoice-42", 4), http.MethodPut, srv.URL+"/rows")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("PUT with token 4 after 5: %s, want 409", resp.Status)
	}
	if !strings.Contains(body, "stale token 4") || !strings.Contains(body, "token 5 was accepted") {
		t.Errorf("409 body = %q, want both tokens named", body)
	}
	err := fencing.StaleResponse(resp)
	var se *fencing.StaleError
	if !errors.Is(err, fencing.ErrStale) || !errors.As(err, &se) || se.Token != 4 || se.Current != 5 || se.Resource != "invoice-42" {
		t.Errorf("StaleResponse() = %v, want a *StaleError invoice-42, 4, 5", err)
	}
	// Another resource is fenced apart.
	if resp, _ := send(t, c, fencing.WithToken(ctx, "invoice-43", 1), http.MethodPut, srv.URL+"/rows"); resp.StatusCode != http.StatusNoContent {
		t.Errorf("PUT to another resource: %s, want 204", resp.Status)
	}
	want := []string{"invoice-42@3", "invoice-42@5", "invoice-42@5", "invoice-43@1"}
	if strings.Join(*writes, " ") != strings.Join(want, " ") {
		t.Errorf("writes reaching the handler = %v, want %v", *writes, want)
	}
}

func TestHandlerMistakes(t *testing.T) {
	srv, writes := fencedServer(t, http.StatusOK)
	for _, c := range []struct {
		name   string
		method string
		token  string
		want   int
	}{
		{"GET without a token passes", http.MethodGet, "", http.StatusOK},
		{"PUT without a token", http.MethodPut, "", http.StatusPreconditionRequired},
		{"POST without a token", http.MethodPost, "", http.StatusPreconditionRequired},
		{"a token not a number", http.MethodPut, "seven", http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+"/r", nil)
		if c.token != "" {
			req.Header.Set(fencing.TokenHeader, c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %s, want %d", c.name, resp.Status, c.want)
		}
		if err := fencing.StaleResponse(resp); err != nil {
			t.Errorf("%s: StaleResponse() = %v, want nil", c.name, err)
		}
	}
	if len(*writes) != 0 {
		t.Errorf("writes reaching the handler = %v, want none", *writes)
	}
	if err := fencing.StaleResponse(nil); err != nil {
		t.Errorf("StaleResponse(nil) = %v, want nil", err)
	}
}

// A request that the handler answers with an error does not raise the
// fence: a lower token still passes after it.
func TestHandlerErrorAnswerDoesNotRaise(t *testing.T) {
	var m fencing.Memory
	srv := httptest.NewServer(fencing.Handler(&m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(fencing.TokenHeader) == "9" {
			http.Error(w, "bad row", http.StatusUnprocessableEntity)
		}
	})))
	defer srv.Close()
	c := &http.Client{Transport: &fencing.Transport{}}
	ctx := context.Background()
	if resp, _ := send(t, c, fencing.WithToken(ctx, "r", 9), http.MethodPut, srv.URL); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("PUT 9: %s, want 422", resp.Status)
	}
	if resp, _ := send(t, c, fencing.WithToken(ctx, "r", 2), http.MethodPut, srv.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT 2 after a refused 9: %s, want 200", resp.Status)
	}
	if tok, _ := m.Token("r"); tok != 2 {
		t.Errorf("Token() = %d, want 2", tok)
	}
}

// The resource defaults to the URL's path; a request without a token in
// its context goes out as it is.
func TestTransportHeaders(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get(fencing.TokenHeader)+"|"+r.Header.Get(fencing.ResourceHeader))
	}))
	defer srv.Close()
	c := &http.Client{Transport: &fencing.Transport{Base: http.DefaultTransport}}
	ctx := context.Background()
	send(t, c, ctx, http.MethodGet, srv.URL)
	send(t, c, fencing.WithToken(ctx, "", 12), http.MethodPut, srv.URL)
	send(t, c, fencing.WithToken(ctx, "invoice-42", -1), http.MethodPut, srv.URL)
	want := "| 12| -1|invoice-42"
	if strings.Join(got, " ") != want {
		t.Errorf("headers = %q, want %q", strings.Join(got, " "), want)
	}
	if _, _, ok := fencing.TokenFrom(ctx); ok {
		t.Error("TokenFrom(Background) ok, want not")
	}
}

func TestHandlerNilPanics(t *testing.T) {
	defer func() {
		if r := recover(); r != "fencing: Handler called with a nil Fence or handler" {
			t.Errorf("recover() = %v", r)
		}
	}()
	fencing.Handler(nil, http.NotFoundHandler())
}
