package s3lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// probeWriters is how many conditional PUTs the probe sends at once.
const probeWriters = 32

// A probe is the verdict on one bucket of a client's store, reached once.
type probe struct {
	done chan struct{}
	err  error // nil: the store honours conditional writes
}

// probe checks, once per bucket, that the store honours conditional
// writes, and returns its verdict: nil, an error wrapping ErrUnsafeStore,
// or a mistake (no such bucket, access denied). A verdict cut by a failure
// that a retry may mend is not kept: the next Lock probes again.
func (s *session) probe(ctx context.Context, client *minio.Client, bucket string) error {
	for {
		s.mu.Lock()
		p := s.probes[bucket]
		if p == nil {
			p = &probe{done: make(chan struct{})}
			s.probes[bucket] = p
			s.mu.Unlock()
			p.err = runProbe(ctx, client, bucket)
			if p.err != nil && !errors.Is(p.err, ErrUnsafeStore) && !mistake(p.err) {
				s.mu.Lock()
				delete(s.probes, bucket)
				s.mu.Unlock()
			}
			close(p.done)
			return p.err
		}
		s.mu.Unlock()
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.err == nil || errors.Is(p.err, ErrUnsafeStore) || mistake(p.err) {
			return p.err
		}
		// Another Lock's probe failed on its own context or a transient
		// error: probe again.
	}
}

// runProbe writes two objects named ".s3lease-probe-<random>-…" in bucket
// and checks what the store does with conditional PUTs:
//
//  1. a PUT with If-None-Match: * of a new object succeeds;
//  2. the same PUT again is refused (412 or 409);
//  3. a PUT with If-Match on an ETag the object does not have is refused;
//  4. of 32 concurrent PUTs with If-None-Match: * of another new object,
//     at most one succeeds;
//  5. of 32 concurrent PUTs with If-Match on the first object's ETag, at
//     most one succeeds.
//
// It deletes both objects before it returns.
func runProbe(ctx context.Context, client *minio.Client, bucket string) error {
	store := client.EndpointURL().String()
	// Flat names, no folder: a store on a file system (versitygw's posix
	// backend) makes a folder of a prefix and removes it with its last
	// object, which races another client's probe in the same folder.
	base := ".s3lease-probe-" + newID()
	one, race := base+"-one", base+"-race"
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		client.RemoveObject(ctx, bucket, one, minio.RemoveObjectOptions{})
		client.RemoveObject(ctx, bucket, race, minio.RemoveObjectOptions{})
	}()
	body := func(n int) []byte {
		return fmt.Appendf(nil, `{"probe":%d,"at":%q}`, n, time.Now().Format(time.RFC3339Nano))
	}
	unsafe := func(format string, args ...any) error {
		return fmt.Errorf("%w: the store at %s (bucket %q) %s", ErrUnsafeStore, store, bucket, fmt.Sprintf(format, args...))
	}
	info, err := put(ctx, client, bucket, one, body(0), true, "")
	if err != nil {
		return fmt.Errorf("probe of conditional writes: %w", err)
	}
	switch _, err := put(ctx, client, bucket, one, body(1), true, ""); {
	case err == nil:
		return unsafe("ignores If-None-Match: a second PutObject with If-None-Match: * of an existing object succeeded")
	case !refused(err):
		return fmt.Errorf("probe of conditional writes: %w", err)
	}
	switch _, err := put(ctx, client, bucket, one, body(2), false, "0123456789abcdef0123456789abcdef"); {
	case err == nil:
		return unsafe("ignores If-Match: a PutObject with If-Match on an ETag the object does not have succeeded")
	case !refused(err):
		return fmt.Errorf("probe of conditional writes: %w", err)
	}
	for _, c := range []struct {
		what        string
		key         string
		ifNoneMatch bool
	}{
		{"If-None-Match: * of a new object", race, true},
		{"If-Match on the object's ETag", one, false},
	} {
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			won      int
			firstErr error
		)
		for i := range probeWriters {
			wg.Go(func() {
				_, err := put(ctx, client, bucket, c.key, body(10+i), c.ifNoneMatch, info.ETag)
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
			return unsafe("let %d of %d concurrent PutObjects with %s succeed, want one at most", won, probeWriters, c.what)
		}
		if firstErr != nil {
			return fmt.Errorf("probe of conditional writes: %w", firstErr)
		}
	}
	return nil
}
