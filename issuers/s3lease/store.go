package s3lease

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"
)

// The error codes of S3 that the lease acts on.
const (
	codePrecondition = "PreconditionFailed" // 412: an If-Match or If-None-Match did not hold
	codeNoSuchKey    = "NoSuchKey"
)

// code returns the S3 error code of err, "" for nil.
func code(err error) string {
	if err == nil {
		return ""
	}
	r := minio.ToErrorResponse(err)
	if r.Code == "" && r.StatusCode == http.StatusPreconditionFailed {
		return codePrecondition
	}
	return r.Code
}

// refused reports whether err is the store's refusal of a conditional
// write: 412, or 409 (a concurrent conditional write, as AWS answers).
func refused(err error) bool {
	return code(err) == codePrecondition || minio.ToErrorResponse(err).StatusCode == http.StatusConflict
}

// mistake reports whether err is a refusal that no retry mends: a client
// error of the store (no such bucket, access denied, a bad signature, a key
// it does not take), not a conflict, a missing key or a throttle.
func mistake(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	r := minio.ToErrorResponse(err)
	switch {
	case r.Code == codeNoSuchKey, r.Code == codePrecondition, r.Code == "SlowDown", r.Code == "RequestTimeout":
		return false
	case r.StatusCode == http.StatusConflict, r.StatusCode == http.StatusTooManyRequests, r.StatusCode == http.StatusRequestTimeout:
		return false
	}
	return r.StatusCode >= 400 && r.StatusCode < 500 || r.Code == "InvalidBucketName" || r.Code == "XMinioInvalidObjectName"
}

// putOptions are the options of every write: one PUT, no multipart.
func putOptions() minio.PutObjectOptions {
	return minio.PutObjectOptions{ContentType: "application/json", DisableMultipart: true}
}

// put writes body to bucket/key, conditional on etag: "*" with none
// creates only, any other value replaces only that ETag.
func put(ctx context.Context, client *minio.Client, bucket, key string, body []byte, ifNoneMatch bool, etag string) (minio.UploadInfo, error) {
	opts := putOptions()
	if ifNoneMatch {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(etag)
	}
	return client.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), opts)
}

// object is a lock object as read.
type object struct {
	body     []byte
	etag     string
	modified time.Time
}

// read returns bucket/key, or nil if there is none.
func read(ctx context.Context, client *minio.Client, bucket, key string) (*object, error) {
	o, err := client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	st, err := o.Stat()
	if code(err) == codeNoSuchKey {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(o, 1<<16))
	if err != nil {
		return nil, err
	}
	return &object{body: body, etag: st.ETag, modified: st.LastModified}, nil
}
