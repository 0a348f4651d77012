package s3lease_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/zukhruf/lease/issuers/s3lease"
)

// fakeStore is an S3 store in memory that answers what minio-go asks for
// a PutObject, a GetObject and a RemoveObject, and honours conditional
// writes only as far as its mode says.
type fakeStore struct {
	mode string // "ignore": If-None-Match and If-Match are ignored; "racy": checked, then written after a pause

	mu      sync.Mutex
	objects map[string][]byte
}

func (f *fakeStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("location") {
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/">us-east-1</LocationConstraint>`)
		return
	}
	f.mu.Lock()
	if f.objects == nil {
		f.objects = make(map[string][]byte)
	}
	body, ok := f.objects[r.URL.Path]
	f.mu.Unlock()
	etag := func(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }
	switch r.Method {
	case http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		if f.mode == "racy" {
			if (r.Header.Get("If-None-Match") == "*" && ok) || (r.Header.Get("If-Match") != "" && (!ok || `"`+etag(body)+`"` != r.Header.Get("If-Match"))) {
				w.WriteHeader(http.StatusPreconditionFailed)
				fmt.Fprint(w, `<Error><Code>PreconditionFailed</Code></Error>`)
				return
			}
			time.Sleep(20 * time.Millisecond) // the check and the write are two steps
		}
		f.mu.Lock()
		f.objects[r.URL.Path] = b
		f.mu.Unlock()
		w.Header().Set("ETag", `"`+etag(b)+`"`)
	case http.MethodGet, http.MethodHead:
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<Error><Code>NoSuchKey</Code></Error>`)
			return
		}
		w.Header().Set("ETag", `"`+etag(body)+`"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
	case http.MethodDelete:
		f.mu.Lock()
		delete(f.objects, r.URL.Path)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}
}

// fakeClient starts f and returns a client of it.
func fakeClient(t *testing.T, f *fakeStore) *minio.Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := minio.New(strings.TrimPrefix(srv.URL, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4("fake", "fake-secret", ""), Region: "us-east-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProbeRefusesStore: a store that ignores conditional headers, and one
// that checks them and writes in two steps, are refused at Lock with
// ErrUnsafeStore, naming the store and what it did; no lock object is
// written, and a second Lock of the client is refused as well.
func TestProbeRefusesStore(t *testing.T) {
	for _, c := range []struct {
		mode, want string
	}{
		{"ignore", "ignores If-None-Match"},
		{"racy", "concurrent PutObjects"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			f := &fakeStore{mode: c.mode}
			client := fakeClient(t, f)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			for range 2 {
				l, err := s3lease.Lock(ctx, client, "locks/orders")
				if !errors.Is(err, s3lease.ErrUnsafeStore) {
					t.Fatalf("Lock on a store that does not honour conditional writes = (%v, %v), want an error wrapping ErrUnsafeStore", l, err)
				}
				if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), client.EndpointURL().String()) {
					t.Errorf("Lock's error = %q, want it to name the store and say %q", err, c.want)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if _, ok := f.objects["/locks/orders"]; ok {
				t.Error("the refused Lock wrote the lock object")
			}
		})
	}
}

// TestConcurrentProbes: the first Locks of 16 clients on one bucket probe
// the store at once, and every probe passes: on versitygw's posix backend,
// probes that shared a folder raced its removal with their last object
// ("Existing Object is a directory").
func TestConcurrentProbes(t *testing.T) {
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			l, err := short.Lock(t.Context(), client(t, shared.Addr()), keyName(t))
			if err == nil {
				err = l.Unlock(t.Context())
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
