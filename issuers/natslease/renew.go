package natslease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// renewer hands each lease of the session to the workers when its renewal
// is due, and sleeps until the next one is.
func (s *session) renewer(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		next := now.Add(time.Hour)
		s.mu.Lock()
		for _, l := range s.leases {
			if l.renewing {
				continue
			}
			if l.next.After(now) {
				next = minTime(next, l.next)
				continue
			}
			select {
			case s.work <- l:
				l.renewing = true
			default:
				// Every worker is busy and the queue is full: look
				// again soon.
				next = minTime(next, now.Add(10*time.Millisecond))
			}
		}
		s.mu.Unlock()
		t.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// worker renews the leases the renewer hands it.
func (s *session) worker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-s.work:
			next := l.renew(ctx)
			s.mu.Lock()
			l.renewing = false
			l.next = next
			s.mu.Unlock()
			s.wake()
		}
	}
}

// renew writes the lease's value again at its last revision, with its TTL,
// and returns when the next renewal is due. The write is a publish with
// the expected last sequence of the key's subject and the Nats-TTL header:
// the KV Update of nats.go sends no TTL, and a write without one would
// leave the key without expiry (nats.go#1994). A confirmed write moves the
// deadline; a refused one loses the lease; a failed one is tried again
// soon, and the deadline decides. A renewal waits for its answer until the
// deadline, or until the session's connection is lost: the answer comes
// back on the connection that sent it, and a renewal cut by a reset is tried
// again on the next connection.
func (l *Lease) renew(ctx context.Context) time.Time {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if l.ctrl.Signal().Err() != nil || l.released.Load() {
		return time.Now().Add(time.Hour)
	}
	s := l.sess
	dctx, cancel := context.WithDeadline(ctx, l.deadline.current())
	defer cancel()
	rctx, cut := context.WithCancelCause(dctx)
	defer cut(nil)
	defer context.AfterFunc(s.link(), func() { cut(errDisconnected) })()
	subject := s.prefix + l.key
	gctx, release := s.guard(rctx, subject)
	defer release()
	rev := l.rev.Load()
	sent := time.Now()
	ack, err := s.js.PublishMsg(gctx, &nats.Msg{Subject: subject, Data: l.value},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(l.cfg.TTL))
	retry := sent.Add(l.cfg.RenewPeriod / 6)
	switch {
	case err == nil:
		l.seen(ack.Sequence)
		l.deadline.confirm(sent)
		return sent.Add(l.cfg.RenewPeriod)
	case refused(gctx) != nil:
		l.loseAnswer(fmt.Errorf("%w: renewal of key %q: %w", ErrRefused, l.key, refused(gctx)))
	case wrongLastSequence(err):
		// Another write came after revision rev: another client's, which
		// the watcher loses the lease for, or this lease's own renewal
		// whose answer was lost, which the watcher records. Until it
		// does, try again; the deadline bounds the wait.
		l.renewalFailed(sent, err)
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrBucketNotFound):
		l.loseAnswer(fmt.Errorf("%w: renewal of key %q: %w", ErrRefused, l.key, err))
	default:
		if errors.Is(context.Cause(rctx), errDisconnected) {
			err = errDisconnected
		}
		l.renewalFailed(sent, err)
	}
	return retry
}

// wrongLastSequence reports whether err is the server's refusal of a write
// whose expected last sequence of its subject was not the last.
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
