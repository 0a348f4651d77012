package natslease

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/controller"
)

func randInt64N(n int64) int64 { return rand.Int64N(n) }

// lock is Lock, and TryLock if try: one path to the grant for both.
func (c Config) lock(ctx context.Context, nc *nats.Conn, key string, try bool) (*Lease, error) {
	begun := time.Now()
	call := "lock"
	if try {
		call = "trylock"
	}
	if ctx == nil {
		if try {
			panic("natslease: TryLock called with a nil context")
		}
		panic("natslease: Lock called with a nil context")
	}
	fail := func(err error) (*Lease, error) { return nil, fmt.Errorf("natslease: %s %q: %w", call, key, err) }
	if nc == nil {
		return fail(errors.New("a nil *nats.Conn"))
	}
	if err := validKey(key); err != nil {
		return fail(err)
	}
	c, err := c.withDefaults()
	if err != nil {
		return fail(err)
	}
	if nc.IsClosed() {
		return fail(nats.ErrConnectionClosed)
	}
	s, err := join(ctx, nc, c.Bucket)
	if err != nil {
		return fail(err)
	}
	if s.maxAge > 0 && s.maxAge < c.TTL {
		s.leave()
		return fail(mistake{fmt.Errorf("bucket %q expires every key after %v (its TTL, the stream's MaxAge), before the lease's TTL %v", c.Bucket, s.maxAge, c.TTL)})
	}
	var b [16]byte
	cryptoRead(b[:])
	l := &Lease{
		ctrl:  controller.New(key),
		sess:  s,
		key:   key,
		value: []byte("natslease:" + hex.EncodeToString(b[:])),
		cfg:   c,
	}
	if err := l.acquire(ctx, try, begun); err != nil {
		s.leave()
		return fail(err)
	}
	return l, nil
}

var cryptoRead = func(b []byte) { crand.Read(b) }

// acquire takes the key: a Create (only if the key is absent, deleted,
// purged or expired) with the TTL, tried again when the watcher says the
// key is free, at the latest every RetryPeriod, until ctx ends. A
// failure that may mend (no answer, a leader election) is tried again with
// backoff; a mistake returns at once. The grant is reported to the
// observer as a wait from begun.
func (l *Lease) acquire(ctx context.Context, try bool, begun time.Time) error {
	s := l.sess
	w := s.await(l.key)
	defer func() {
		if w != nil {
			s.unwait(w)
		}
	}()
	backoff := newBackoff(l.cfg.RetryPeriod)
	subject := s.prefix + l.key
	for {
		gctx, release := s.guard(ctx, subject)
		sent := time.Now()
		rev, err := s.kv.Create(gctx, l.key, l.value, jetstream.KeyTTL(l.cfg.TTL))
		perm := refused(gctx)
		release()
		switch {
		case err == nil:
			l.granted = rev
			l.rev.Store(rev)
			l.next = sent.Add(l.cfg.RenewPeriod)
			l.grantedAt(begun)
			// Armed before the session holds the lease: a grant whose
			// answer came after its deadline gives a lease already lost.
			l.deadline.start(l.cfg, sent, l.loseAtDeadline)
			l.armWatch()
			s.hold(l)
			// The waiter is removed only once the lease is held, so that
			// every entry of the key after the grant reaches one or the
			// other; one that reached both is judged twice, to the same
			// end.
			last := s.unwait(w)
			w = nil
			if last != nil {
				l.judge(last)
			}
			return nil
		case perm != nil:
			return fmt.Errorf("kv.Create: %w", perm)
		case errors.Is(err, jetstream.ErrKeyExists):
			if try {
				return fmt.Errorf("kv.Create: %w: %w", lease.ErrHeld, err)
			}
			backoff = newBackoff(l.cfg.RetryPeriod)
			t := time.NewTimer(l.cfg.RetryPeriod)
			select {
			case <-w.wake:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		case ctx.Err() != nil:
			// The Create may have reached the server: a key that holds
			// this Lock's value is given back, so that the cut Lock
			// leaves nothing held.
			l.giveBack()
		case errors.Is(err, jetstream.ErrInvalidKey):
			return fmt.Errorf("kv.Create: %w", err)
		default:
			if werr := backoff.wait(ctx); werr != nil {
				l.giveBack()
				return fmt.Errorf("%w (last: kv.Create: %w)", werr, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// giveBack deletes the key if it holds this Lock's value: a Create whose
// answer was lost, or cut by its context after the server applied it.
func (l *Lease) giveBack() {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.RenewPeriod)
	defer cancel()
	e, err := l.sess.kv.Get(ctx, l.key)
	if err == nil && string(e.Value()) == string(l.value) {
		_ = l.sess.kv.Delete(ctx, l.key, jetstream.LastRevision(e.Revision()))
	}
}

// validKey refuses what a KV bucket cannot take as a key, at once: the
// empty key, and one with other characters than letters, digits and
// "-/_=.", or starting or ending with ".".
func validKey(key string) error {
	if key == "" {
		return errors.New("the empty key")
	}
	if key[0] == '.' || key[len(key)-1] == '.' {
		return fmt.Errorf("key %.60q starts or ends with '.', which a KV bucket refuses", key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '/' || c == '_' || c == '=' || c == '.':
		default:
			return fmt.Errorf("key %.60q has %q, which a KV bucket refuses (letters, digits and -/_=. only)", key, rune(c))
		}
	}
	return nil
}
