package fencingtest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/fencingtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// registers is the server side of the suite's HTTP store: a value and its
// token per resource, written under a fencing.Handler over a Memory at
// /v/, unfenced at /raw/.
type registers struct {
	mu sync.Mutex
	m  map[string]string // resource: "token value"
}

func (g *registers) put(resource, value string, token int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m[resource] = strconv.FormatInt(token, 10) + " " + value
}

func newServer(t *testing.T) string {
	t.Helper()
	if fencingtest.Child() {
		return "" // the suite passes the parent's on
	}
	g := &registers{m: map[string]string{}}
	var fence fencing.Memory
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			w.WriteHeader(http.StatusNoContent) // an advance: the fence alone
			return
		}
		body, _ := io.ReadAll(r.Body)
		tok, _ := strconv.ParseInt(r.Header.Get(fencing.TokenHeader), 10, 64)
		g.put(r.Header.Get(fencing.ResourceHeader), string(body), tok)
	})
	mux := http.NewServeMux()
	mux.Handle("/v/", fencing.Handler(&fence, write))
	mux.HandleFunc("GET /get/{resource}", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		fmt.Fprint(w, g.m[r.PathValue("resource")])
	})
	mux.HandleFunc("PUT /raw/{resource}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tok, _ := strconv.ParseInt(r.URL.Query().Get("token"), 10, 64)
		g.put(r.PathValue("resource"), string(body), tok)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// httpStore is the suite's client of the server: a fencing.Transport.
type httpStore struct {
	base string
	c    *http.Client
}

func openHTTP(t *testing.T, addr string) fencingtest.Store {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &httpStore{base: "http://" + addr, c: &http.Client{Transport: &fencing.Transport{Base: tr}}}
}

func (s *httpStore) do(ctx context.Context, method, path, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := s.c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if err := fencing.StaleResponse(resp); err != nil {
		return "", err
	}
	if resp.StatusCode >= 300 {
		return "", fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return string(b), nil
}

func (s *httpStore) Write(ctx context.Context, resource string, token int64, value string) error {
	_, err := s.do(fencing.WithToken(ctx, resource, token), http.MethodPut, "/v/"+url.PathEscape(resource), value)
	return err
}

func (s *httpStore) Advance(ctx context.Context, resource string, token int64) error {
	_, err := s.do(fencing.WithToken(ctx, resource, token), http.MethodPost, "/v/"+url.PathEscape(resource), "")
	return err
}

func (s *httpStore) Get(ctx context.Context, resource string) (string, int64, error) {
	b, err := s.do(ctx, http.MethodGet, "/get/"+url.PathEscape(resource), "")
	if err != nil || b == "" {
		return "", 0, err
	}
	tok, value, _ := strings.Cut(b, " ")
	n, err := strconv.ParseInt(tok, 10, 64)
	return value, n, err
}

func (s *httpStore) Put(ctx context.Context, resource, value string, token int64) error {
	_, err := s.do(ctx, http.MethodPut, "/raw/"+url.PathEscape(resource)+"?token="+strconv.FormatInt(token, 10), value)
	return err
}

// TestHTTPMemory runs the suite on fencing.Handler over a Memory, through
// fencing.Transport.
func TestHTTPMemory(t *testing.T) {
	fencingtest.Run(t, fencingtest.Harness{Addr: newServer(t), Open: openHTTP})
}

func TestNegativeControls(t *testing.T) {
	fencingtest.RunNegativeControls(t, fencingtest.Harness{Addr: newServer(t), Open: openHTTP})
}
