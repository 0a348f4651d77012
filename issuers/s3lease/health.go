package s3lease

import (
	"context"
	"time"
)

// ReleaseTimeout bounds the release that Unlock sends when its context has
// ended already: the release still goes out, under the context's values
// without its end, for at most this long. An object whose release did not
// go through is taken over once its written expiry passes.
const ReleaseTimeout = 5 * time.Second

// releaseContext returns the context a release is sent under: ctx while it
// is live, and a detached one bounded by ReleaseTimeout once it ended.
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
}
