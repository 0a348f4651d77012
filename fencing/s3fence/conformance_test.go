package s3fence_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease/fencing/s3fence"
	"github.com/zukhruf/lease/fencing/s3fence/internal/s3server"
	"github.com/zukhruf/lease/fencingtest"
)

// store is fencingtest's Store on a client of its own: the register is an
// object of the bucket, written through the fence.
type store struct {
	c *minio.Client
	f s3fence.Fence
}

func open(t *testing.T, addr string) fencingtest.Store {
	c := s3server.Client(addr)
	return &store{c, s3fence.Fence{Client: c, Bucket: bucket}}
}

func (s *store) Write(ctx context.Context, key string, token int64, value string) error {
	return s.f.Put(ctx, key, token, []byte(value))
}

func (s *store) Advance(ctx context.Context, key string, token int64) error {
	return s.f.Advance(ctx, key, token)
}

func (s *store) Get(ctx context.Context, key string) (string, int64, error) {
	b, tok, err := s.f.Get(ctx, key)
	return string(b), tok, err
}

// Put writes the object as a fenced write would, with the token as its
// fence and its bytes' token, but unconditionally: the PutObject of the
// negative controls.
func (s *store) Put(ctx context.Context, key, value string, token int64) error {
	b := fmt.Appendf(nil, "s3fence %d %d put\n%s", token, token, value)
	_, err := s.c.PutObject(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{DisableMultipart: true})
	return err
}

func harness() fencingtest.Harness { return fencingtest.Harness{Addr: addr, Open: open} }

// TestConformance runs fencingtest on the S3 fence, on versitygw.
func TestConformance(t *testing.T) { fencingtest.Run(t, harness()) }

// TestNegativeControls runs fencingtest's fences built wrong on the same
// server: each must fail the suite.
func TestNegativeControls(t *testing.T) { fencingtest.RunNegativeControls(t, harness()) }
