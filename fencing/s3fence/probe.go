package s3fence

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/minio/minio-go/v7"
)

// probeWriters is how many conditional PutObjects the probe sends at once.
const probeWriters = 32

type probeKey struct {
	client weak.Pointer[minio.Client]
	bucket string
}

type probe struct {
	done chan struct{}
	err  error
}

var probes struct {
	sync.Mutex
	m map[probeKey]*probe
}

// probeOnce probes client's store on bucket once (see runProbe), and
// returns its verdict: nil, or an error wrapping ErrUnsafeStore. Any other
// failure is not kept: the next write probes again.
func probeOnce(ctx context.Context, client *minio.Client, bucket string) error {
	k := probeKey{weak.Make(client), bucket}
	for {
		probes.Lock()
		p := probes.m[k]
		if p == nil {
			if probes.m == nil {
				probes.m = make(map[probeKey]*probe)
			}
			p = &probe{done: make(chan struct{})}
			probes.m[k] = p
			runtime.AddCleanup(client, func(k probeKey) {
				probes.Lock()
				delete(probes.m, k)
				probes.Unlock()
			}, k)
			probes.Unlock()
			p.err = runProbe(ctx, client, bucket)
			if p.err != nil && !isUnsafe(p.err) {
				probes.Lock()
				delete(probes.m, k)
				probes.Unlock()
			}
			close(p.done)
			return p.err
		}
		probes.Unlock()
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.err == nil || isUnsafe(p.err) {
			return p.err
		}
	}
}

func isUnsafe(err error) bool { return errors.Is(err, ErrUnsafeStore) }

// runProbe writes an object named ".s3fence-probe-<random>" in bucket and checks
// that a second PutObject with If-None-Match: * is refused, that one with
// If-Match on a wrong ETag is refused, and that of 32 concurrent
// PutObjects with If-Match on the object's ETag one at most succeeds. It
// deletes the object before it returns.
func runProbe(ctx context.Context, client *minio.Client, bucket string) error {
	var n [8]byte
	rand.Read(n[:])
	key := ".s3fence-probe-" + hex.EncodeToString(n[:]) // no folder: see s3lease's probe
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{})
	}()
	put := func(i int, ifNoneMatch bool, etag string) (minio.UploadInfo, error) {
		b := fmt.Appendf(nil, "probe %d %d", i, time.Now().UnixNano())
		opts := minio.PutObjectOptions{DisableMultipart: true}
		if ifNoneMatch {
			opts.SetMatchETagExcept("*")
		} else {
			opts.SetMatchETag(etag)
		}
		return client.PutObject(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), opts)
	}
	unsafe := func(format string, args ...any) error {
		return fmt.Errorf("%w: the store at %s (bucket %q) %s", ErrUnsafeStore, client.EndpointURL(), bucket, fmt.Sprintf(format, args...))
	}
	info, err := put(0, true, "")
	if err != nil {
		return fmt.Errorf("probe of conditional writes: %w", err)
	}
	switch _, err := put(1, true, ""); {
	case err == nil:
		return unsafe("ignores If-None-Match: a second PutObject with If-None-Match: * of an existing object succeeded")
	case !refused(err):
		return fmt.Errorf("probe of conditional writes: %w", err)
	}
	switch _, err := put(2, false, "0123456789abcdef0123456789abcdef"); {
	case err == nil:
		return unsafe("ignores If-Match: a PutObject with If-Match on an ETag the object does not have succeeded")
	case !refused(err):
		return fmt.Errorf("probe of conditional writes: %w", err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      int
		firstErr error
	)
	for i := range probeWriters {
		wg.Go(func() {
			_, err := put(10+i, false, info.ETag)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !refused(err) && firstErr == nil:
				firstErr = err
			}
		})
	}
	wg.Wait()
	if won > 1 {
		return unsafe("let %d of %d concurrent PutObjects with If-Match on one ETag succeed, want one at most", won, probeWriters)
	}
	if firstErr != nil {
		return fmt.Errorf("probe of conditional writes: %w", firstErr)
	}
	return nil
}
