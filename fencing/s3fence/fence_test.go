package s3fence_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/fencing/s3fence"
	"github.com/zukhruf/lease/fencing/s3fence/internal/s3server"
)

// TestProbeRefusesStore: a store that ignores If-None-Match and If-Match
// is refused at the first write with ErrUnsafeStore, naming the store, and
// the resource is not written.
func TestProbeRefusesStore(t *testing.T) {
	objects := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Has("location"):
			fmt.Fprint(w, `<LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/">us-east-1</LocationConstraint>`)
		case r.Method == http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			objects[r.URL.Path] = b
			w.Header().Set("ETag", fmt.Sprintf(`"%032x"`, len(b)))
		case r.Method == http.MethodDelete:
			delete(objects, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<Error><Code>NoSuchKey</Code></Error>`)
		}
	}))
	defer srv.Close()
	c, err := minio.New(strings.TrimPrefix(srv.URL, "http://"), &minio.Options{Creds: credentials.NewStaticV4("a", "b", ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	f := s3fence.Fence{Client: c, Bucket: "fenced"}
	err = f.Put(t.Context(), "rows", 3, []byte("x"))
	if !errors.Is(err, s3fence.ErrUnsafeStore) || !strings.Contains(err.Error(), c.EndpointURL().String()) {
		t.Fatalf("Put on a store that ignores conditional writes = %v, want ErrUnsafeStore naming the store", err)
	}
	if _, ok := objects["/fenced/rows"]; ok {
		t.Error("the refused Put wrote the resource")
	}
}

// TestStaleError: a lower token is refused with a *fencing.StaleError that
// errors.As finds through wrapping, naming both tokens; Get returns the
// bytes without the header.
func TestStaleError(t *testing.T) {
	ctx := t.Context()
	f := s3fence.Fence{Client: s3server.Client(addr), Bucket: bucket}
	if err := f.Put(ctx, "stale", 10, []byte("ten")); err != nil {
		t.Fatal(err)
	}
	err := fmt.Errorf("wrapped: %w", f.Put(ctx, "stale", 9, []byte("nine")))
	var se *fencing.StaleError
	if !errors.As(err, &se) || se.Token != 9 || se.Current != 10 || !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Put(9) after 10 = %v, want a StaleError of 9 against 10", err)
	}
	b, tok, err := f.Get(ctx, "stale")
	if err != nil || !bytes.Equal(b, []byte("ten")) || tok != 10 {
		t.Errorf("Get = %q, %d, %v, want \"ten\", 10", b, tok, err)
	}
}

var benchToken int64

// BenchmarkWrite: a fenced Put (a ranged GET of the header and a
// conditional PutObject) beside an unfenced PutObject of the same bytes,
// on versitygw.
func BenchmarkWrite(b *testing.B) {
	c := s3server.Client(addr)
	f := s3fence.Fence{Client: c, Bucket: bucket}
	body := bytes.Repeat([]byte("r"), 1024)
	b.Run("fenced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			benchToken++ // above every earlier run's: the object outlives a run
			if err := f.Put(b.Context(), "bench-fenced", benchToken, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unfenced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.PutObject(b.Context(), bucket, "bench-unfenced", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{DisableMultipart: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
