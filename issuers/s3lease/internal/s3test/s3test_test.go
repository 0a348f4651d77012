package s3test_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"
)

// TestServer: a Server serves S3, keeps its objects across a kill and a
// restart on the same port, answers nothing while paused, and again once
// resumed.
func TestServer(t *testing.T) {
	s := s3test.Start(t)
	if err := s.Bucket("bucket"); err != nil {
		t.Fatal(err)
	}
	c := s3test.Client(s.Addr())
	ctx := t.Context()
	body := []byte("kept")
	if _, err := c.PutObject(ctx, "bucket", "k", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	o, err := c.GetObject(ctx, "bucket", "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	o.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("after the restart: GetObject = %q, %v, want %q", got, err, body)
	}
	s.Pause()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.ListBuckets(short)
	cancel()
	s.Resume()
	if err == nil {
		t.Error("a paused server answered ListBuckets")
	}
	if _, err := c.ListBuckets(ctx); err != nil {
		t.Errorf("after Resume: ListBuckets = %v", err)
	}
}
