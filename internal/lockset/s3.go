package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/zukhruf/lease/internal/gobin"
	"github.com/zukhruf/lease/internal/lockset/history"
	"github.com/zukhruf/lease/issuers/s3lease"
)

// The root user's keys of the runs' versitygw, and the bucket of their
// lock objects.
const (
	s3AccessKey = "lockset-access"
	s3SecretKey = "lockset-secret-key"
	s3Bucket    = "lockset"
)

// versitygw is the versitygw that s3lease's tests build into the user's
// cache folder (make s3-versitygw), of the version that their module pins;
// VERSITYGW overrides it.
var versitygw = gobin.Binary{
	Name:    "versitygw",
	Module:  "github.com/versity/versitygw",
	Package: "github.com/versity/versitygw/cmd/versitygw",
	Dir:     gobin.Beside("../../issuers/s3lease/internal/s3test/versitygw"),
	Env:     "VERSITYGW",
	Make:    "s3-versitygw",
	Took:    "a cold build takes minutes",
}

// versitygwCommand returns the command of a versitygw on its posix backend
// in dir, at port, which a restart after SIGKILL finds again: one file an
// object.
func versitygwCommand(dir string, port int) (*exec.Cmd, error) {
	bin, err := versitygw.Ensure(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--access", s3AccessKey, "--secret", s3SecretKey, "--port", "127.0.0.1:"+strconv.Itoa(port), "--quiet", "posix", data)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

func s3Client(addr string) (*minio.Client, error) {
	return minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(s3AccessKey, s3SecretKey, ""), Region: "us-east-1"})
}

// s3Ready waits until versitygw at addr answers and the bucket of the
// runs' lock objects exists.
func s3Ready(addr string, exited <-chan struct{}) error {
	c, err := s3Client(addr)
	if err != nil {
		return err
	}
	return waitServing("versitygw", 30*time.Second, exited, func(ctx context.Context) error {
		err := c.MakeBucket(ctx, s3Bucket, minio.MakeBucketOptions{})
		if err != nil && minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
			return err
		}
		return nil
	})
}

func (r *runner) startS3() (string, error) {
	return r.serve(func(port int) (*exec.Cmd, error) {
		return versitygwCommand(filepath.Join(r.dir, "server"), port)
	}, false, s3Ready)
}

// s3DeleteObject deletes lock's object as an operator would.
func (r *runner) s3DeleteObject(ctx context.Context, lock string) (int64, bool) {
	c, err := s3Client(fmt.Sprintf("127.0.0.1:%d", r.serverPort))
	if err != nil {
		return 0, false
	}
	if _, err := c.StatObject(ctx, s3Bucket, s3Key(lock), minio.StatObjectOptions{}); err != nil {
		return 0, false
	}
	at := history.Now()
	return at, c.RemoveObject(ctx, s3Bucket, s3Key(lock), minio.RemoveObjectOptions{}) == nil
}

func s3Key(lock string) string { return "lockset/" + lock }

// s3Locker takes the lock with s3lease (side lease) or by hand (side
// peer): the lockfile that Terraform's S3 backend writes, a PutObject with
// If-None-Match: * to take and a DeleteObject to release, never renewed,
// its token the taker's clock at the take (a lockfile has none).
type s3Locker struct {
	cfg    clientConfig
	client *minio.Client
}

func newS3Locker(c clientConfig) (*s3Locker, error) {
	client, err := s3Client(c.endpoint)
	if err != nil {
		return nil, err
	}
	return &s3Locker{cfg: c, client: client}, nil
}

func (l *s3Locker) close() {}

func (l *s3Locker) acquire(ctx context.Context, lock string) (holding, error) {
	if l.cfg.side == "peer" {
		return l.acquireByHand(ctx, s3Key(lock))
	}
	le, err := s3lease.Config{Bucket: s3Bucket, TTL: l.cfg.ttl}.Lock(ctx, l.client, s3Key(lock))
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errUnknown, err)
		}
		return nil, err
	}
	return leaseHolding{sig: le.Signal(), tok: le.Token(), unlock: le.Unlock}, nil
}

func (l *s3Locker) acquireByHand(ctx context.Context, key string) (holding, error) {
	for {
		tok := time.Now().UnixNano()
		body := fmt.Appendf(nil, `{"ID":"%d","Who":%q,"Operation":"apply"}`, tok, l.cfg.p)
		opts := minio.PutObjectOptions{DisableMultipart: true}
		opts.SetMatchETagExcept("*")
		cctx, cancel := context.WithTimeout(ctx, l.cfg.ttl)
		_, err := l.client.PutObject(cctx, s3Bucket, key, bytes.NewReader(body), int64(len(body)), opts)
		cancel()
		if err == nil {
			return &lockfileHolding{client: l.client, key: key, tok: tok, lostC: make(chan struct{})}, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errUnknown, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", errUnknown, ctx.Err())
		case <-time.After(l.cfg.ttl / 8):
		}
	}
}

// lockfileHolding is a lockfile held: never renewed, so held until its
// holder deletes it; nothing tells it of another's deletion.
type lockfileHolding struct {
	client *minio.Client
	key    string
	tok    int64
	lostC  chan struct{} // never closed: a lockfile is not lost
}

func (h *lockfileHolding) token() int64          { return h.tok }
func (h *lockfileHolding) lost() <-chan struct{} { return h.lostC }
func (h *lockfileHolding) held() bool            { return true }
func (h *lockfileHolding) release(ctx context.Context) error {
	return h.client.RemoveObject(ctx, s3Bucket, h.key, minio.RemoveObjectOptions{})
}
