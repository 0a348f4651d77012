// Package s3fence fences S3 objects by compare-and-swap: each write reads
// the object, compares the fencing token it carries with the write's, and
// writes it back with a PutObject conditional on If-Match with the ETag
// read (If-None-Match: * for a new object), retried when the store answers
// 412; a lower token is refused with a *[fencing.StaleError].
//
// S3 has no ordered compare: the conditional write is the atomic step, so
// a fence is only as good as the store's If-Match. The first write of a
// Fence's client on a bucket probes the store (32 concurrent conditional
// PutObjects on one ETag, exactly one of which may succeed) and refuses a
// store that fails ([ErrUnsafeStore]).
//
// An object a Fence writes holds a header line before the caller's bytes:
// "s3fence <fence> <token> <nonce>\n", the highest token the object
// accepted, the token its bytes were written with, and a random nonce, so
// that no two writes have the same bytes (S3's ETag of a PutObject is the
// MD5 of its body: two writes of the same bytes would have one ETag, and an
// If-Match on it would match either). Read it with [Fence.Get]. The tokens
// are in the object's metadata too (X-Amz-Meta-Fencing-Token), for
// operators.
package s3fence

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease/fencing"
)

// ErrUnsafeStore reports that the store failed the probe: it ignores
// If-Match or If-None-Match on PutObject, or let more than one of 32
// concurrent conditional PutObjects succeed. The error names the store.
var ErrUnsafeStore = errors.New("s3fence: the store does not honour conditional writes")

// Fence writes objects of one bucket under their fences. A Fence is safe
// for use by many goroutines at once; the zero Fence has no client, and
// each call returns an error that says so.
type Fence struct {
	Client *minio.Client
	Bucket string
}

// maxHeader bounds the header line of an object.
const maxHeader = 128

// Put writes body to key with token if token is at least the highest
// token key accepted, raising its fence to token, in one conditional
// PutObject; otherwise it writes nothing and returns a *fencing.StaleError
// naming both tokens. An equal token passes. A write that lost a race to
// another (412) reads the object again and tries again, until ctx ends.
func (f Fence) Put(ctx context.Context, key string, token int64, body []byte) error {
	return f.write(ctx, key, token, body, false)
}

// Advance raises key's fence to token without changing its bytes, so that
// every older holder's write is refused from now on: the call to make
// right after a grant. It rewrites the object (a read of its bytes and a
// conditional PutObject of the same bytes under the new header), or
// creates it empty if there is none; a token equal to the fence writes
// nothing. A lower token returns a *fencing.StaleError.
func (f Fence) Advance(ctx context.Context, key string, token int64) error {
	return f.write(ctx, key, token, nil, true)
}

// Get returns key's bytes and the token they were written with: nil and 0
// if the object does not exist, or holds bytes that no Fence wrote.
func (f Fence) Get(ctx context.Context, key string) (body []byte, token int64, err error) {
	if err := f.check(key); err != nil {
		return nil, 0, err
	}
	o, err := f.read(ctx, key, false)
	if err != nil || o == nil {
		return nil, 0, err
	}
	return o.body, o.token, nil
}

func (f Fence) check(key string) error {
	switch {
	case f.Client == nil:
		return errors.New("s3fence: Fence without a Client")
	case f.Bucket == "":
		return errors.New("s3fence: Fence without a Bucket")
	case key == "":
		return errors.New("s3fence: empty key")
	}
	return nil
}

func (f Fence) write(ctx context.Context, key string, token int64, body []byte, advance bool) error {
	if err := f.check(key); err != nil {
		return err
	}
	if err := probeOnce(ctx, f.Client, f.Bucket); err != nil {
		return fmt.Errorf("s3fence: fenced write of %q: %w", key, err)
	}
	for attempt := 0; ; attempt++ {
		o, err := f.read(ctx, key, !advance)
		if err != nil {
			return fmt.Errorf("s3fence: fenced write of %q: %w", key, err)
		}
		valueToken := token
		if o != nil {
			if token < o.fence {
				return &fencing.StaleError{Resource: key, Token: token, Current: o.fence}
			}
			if advance {
				if token == o.fence {
					return nil
				}
				body, valueToken = o.body, o.token
			}
		} else if advance {
			valueToken = 0
		}
		opts := minio.PutObjectOptions{DisableMultipart: true, UserMetadata: map[string]string{"Fencing-Token": strconv.FormatInt(token, 10)}}
		if o == nil {
			opts.SetMatchETagExcept("*")
		} else {
			opts.SetMatchETag(o.etag)
		}
		data := append(header(token, valueToken), body...)
		_, err = f.Client.PutObject(ctx, f.Bucket, key, bytes.NewReader(data), int64(len(data)), opts)
		if err == nil {
			return nil
		}
		if !refused(err) {
			return fmt.Errorf("s3fence: fenced write of %q: %w", key, err)
		}
		// Another write came between the read and this one: read again.
		t := time.NewTimer(time.Duration(mrand.Int64N(int64(time.Millisecond) << min(attempt, 6))))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("s3fence: fenced write of %q: %w", key, ctx.Err())
		case <-t.C:
		}
	}
}

// header returns an object's header line.
func header(fence, token int64) []byte {
	var n [8]byte
	rand.Read(n[:])
	return fmt.Appendf(nil, "s3fence %d %d %s\n", fence, token, hex.EncodeToString(n[:]))
}

// object is a fenced object as read.
type object struct {
	etag         string
	fence, token int64
	body         []byte // the caller's bytes, nil if only the header was read
}

// read returns key's object, or nil if there is none; headerOnly reads its
// first bytes only. An object without a header has fence and token 0. A
// read that met a write of the object in its midst (minio-go reads on
// with If-Match, which the store answers 412) reads again.
func (f Fence) read(ctx context.Context, key string, headerOnly bool) (*object, error) {
	for {
		o, err := f.readOnce(ctx, key, headerOnly)
		if minio.ToErrorResponse(err).Code != "PreconditionFailed" || ctx.Err() != nil {
			return o, err
		}
	}
}

func (f Fence) readOnce(ctx context.Context, key string, headerOnly bool) (*object, error) {
	opts := minio.GetObjectOptions{}
	if headerOnly {
		opts.SetRange(0, maxHeader-1)
	}
	r, err := f.Client.GetObject(ctx, f.Bucket, key, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	st, err := r.Stat()
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	o := &object{etag: st.ETag}
	line, rest, ok := bytes.Cut(b, []byte("\n"))
	fields := strings.Fields(string(line))
	if !ok || len(fields) != 4 || fields[0] != "s3fence" {
		return o, nil // bytes no Fence wrote: no fence yet
	}
	o.fence, _ = strconv.ParseInt(fields[1], 10, 64)
	o.token, _ = strconv.ParseInt(fields[2], 10, 64)
	if !headerOnly {
		o.body = rest
	}
	return o, nil
}

// refused reports whether err is the store's refusal of a conditional
// write: 412, 409 (a concurrent conditional write, as AWS answers), or a
// missing object under If-Match.
func refused(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "PreconditionFailed" || r.Code == "NoSuchKey" ||
		r.StatusCode == http.StatusPreconditionFailed || r.StatusCode == http.StatusConflict
}
