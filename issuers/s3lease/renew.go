package s3lease

import (
	"context"
	"fmt"
	"time"
)

// renew sends one renewal of l, a PutObject of a new record conditional on
// If-Match with the ETag of l's last write, and returns when the next one
// is due. The session's renewers run it; it holds l.writing through the write,
// so that Unlock's release comes after it.
//
// A write the store applied moves the deadline from its send time. A 412
// (the object was written by someone else since) loses the lease at once
// with ErrTakenOver, and a missing object with ErrDeleted; nothing is asked
// of the store in between. Any other failure is tried again a quarter of a
// RenewPeriod later: only the deadline says that the store was silent too
// long.
func (l *Lease) renew() time.Time {
	l.writing <- struct{}{}
	defer func() { <-l.writing }()
	if l.done() {
		return time.Now()
	}
	left := time.Until(l.deadline.current())
	if left <= 0 {
		return time.Now().Add(l.cfg.RenewPeriod / 4) // the deadline's timer loses it
	}
	ctx, cancel := context.WithTimeout(context.Background(), left)
	defer cancel()
	l.seq++
	sent := time.Now()
	r := record{Holder: l.cfg.Holder, ID: l.id, Epoch: l.token, Seq: l.seq, Expires: l.cfg.now().Add(l.cfg.TTL), TTL: l.cfg.TTL.String()}
	info, err := put(ctx, l.client, l.bucket, l.key, r.encode(), false, l.etag)
	switch {
	case err == nil:
		l.etag = info.ETag
		if at, confirmed, moved := l.deadline.confirm(sent); moved && l.cfg.Observer != nil {
			l.renewed(sent, at, confirmed)
		}
		return sent.Add(l.cfg.RenewPeriod)
	case code(err) == codePrecondition:
		l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s found another ETag than %s: %v", ErrTakenOver, clock(sent), l.etag, err))
	case code(err) == codeNoSuchKey:
		l.loseAnswer(fmt.Errorf("%w: the renewal sent at %s: %v", ErrDeleted, clock(sent), err))
	default:
		if l.cfg.Observer != nil {
			l.renewalFailed(sent, err)
		}
	}
	return time.Now().Add(l.cfg.RenewPeriod / 4)
}
