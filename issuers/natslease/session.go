package natslease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A session is what the leases of one client connection and bucket share:
// a connection of the issuer's own, dialled with the client's options, one
// KV watcher of the bucket that follows every key held or waited for, and
// one renewer that renews each lease when it is due, through a fixed pool
// of workers. A lease is a thin view of it: its key, value, revision,
// deadline and controller. A session lives while a lease or a Lock is on
// it; the last to leave closes it.
type session struct {
	key   sessionKey
	ready chan struct{} // closed once opened or failed
	err   error         // the open's failure, set before ready closes
	refs  int           // guarded by sessions.mu

	conn   *nats.Conn
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string        // the subject of a key less the key: "$KV.<bucket>."
	maxAge time.Duration // the bucket's own TTL (the stream's MaxAge), zero for none

	mu      sync.Mutex
	leases  map[string]*Lease               // held, by key
	waiters map[string]map[*waiter]struct{} // Locks between their first Create and their grant
	perms   map[*permWatch]struct{}

	// linkCtx is cancelled when the session's connection is lost, and
	// replaced by a live one: a renewal waits for its answer no longer
	// than its connection lasts.
	linkMu     sync.Mutex
	linkCtx    context.Context
	linkCancel context.CancelFunc

	work  chan *Lease   // due renewals, read by the workers
	kick  chan struct{} // wakes the renewer
	stop  context.CancelFunc
	watch jetstream.KeyWatcher
	wg    sync.WaitGroup
}

// renewWorkers is how many renewals of one session run at once: enough
// that a slow answer does not hold up the other leases' renewals, a bound
// that does not grow with the leases.
const renewWorkers = 16

type sessionKey struct {
	nc     *nats.Conn
	bucket string
}

var sessions struct {
	mu sync.Mutex
	m  map[sessionKey]*session
}

// mistake marks an error no retry mends: Lock returns it at once.
type mistake struct{ err error }

func (m mistake) Error() string { return m.err.Error() }
func (m mistake) Unwrap() error { return m.err }

func isMistake(err error) bool {
	var m mistake
	return errors.As(err, &m)
}

// join returns the open session of nc and bucket, opening it if there is
// none, and counts the caller in; the caller calls leave once.
func join(ctx context.Context, nc *nats.Conn, bucket string) (*session, error) {
	k := sessionKey{nc, bucket}
	backoff := newBackoff(time.Second)
	for {
		sessions.mu.Lock()
		if sessions.m == nil {
			sessions.m = map[sessionKey]*session{}
		}
		s := sessions.m[k]
		if s == nil {
			s = &session{key: k, ready: make(chan struct{}), refs: 1}
			sessions.m[k] = s
			sessions.mu.Unlock()
			s.err = s.open(ctx)
			if s.err != nil {
				sessions.mu.Lock()
				if sessions.m[k] == s {
					delete(sessions.m, k)
				}
				sessions.mu.Unlock()
			}
			close(s.ready)
			if s.err != nil {
				return nil, s.err
			}
			return s, nil
		}
		s.refs++
		sessions.mu.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			s.unref()
			return nil, ctx.Err()
		}
		if s.err == nil {
			return s, nil
		}
		s.unref()
		if isMistake(s.err) {
			return nil, s.err
		}
		// Another Lock's open failed for its own reason (its context
		// ended): open it again.
		if err := backoff.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// unref counts out a caller of a session that failed to open.
func (s *session) unref() {
	sessions.mu.Lock()
	s.refs--
	sessions.mu.Unlock()
}

// leave counts the caller out, and closes the session if it was the last.
func (s *session) leave() {
	sessions.mu.Lock()
	s.refs--
	last := s.refs == 0
	if last && sessions.m[s.key] == s {
		delete(sessions.m, s.key)
	}
	sessions.mu.Unlock()
	if last {
		s.close()
	}
}

// open dials the session's connection, checks the bucket and starts the
// watcher, the renewer and its workers. It retries what may mend (no
// server answers, JetStream has no leader yet) until ctx ends, and returns
// a mistake at once.
func (s *session) open(ctx context.Context) error {
	s.leases = map[string]*Lease{}
	s.waiters = map[string]map[*waiter]struct{}{}
	s.perms = map[*permWatch]struct{}{}
	s.prefix = "$KV." + s.key.bucket + "."
	s.linkCtx, s.linkCancel = context.WithCancel(context.Background())
	backoff := newBackoff(time.Second)
	for {
		err := s.try(ctx)
		if err == nil {
			return nil
		}
		if s.conn != nil {
			s.conn.Close()
			s.conn = nil
		}
		if isMistake(err) {
			return err
		}
		if werr := backoff.wait(ctx); werr != nil {
			return fmt.Errorf("%w (last: %w)", werr, err)
		}
	}
}

// try is one attempt of open.
func (s *session) try(ctx context.Context) error {
	opts := s.key.nc.Opts // a copy: the client's servers, credentials, TLS and dialer
	opts.Name = "natslease"
	opts.AllowReconnect = true
	opts.MaxReconnect = -1
	opts.ReconnectWait = 100 * time.Millisecond
	opts.ReconnectJitter = 100 * time.Millisecond
	opts.CustomReconnectDelayCB = nil
	opts.RetryOnFailedConnect = false
	// A write buffered while disconnected would reach the server later
	// than this process believes: fail it at once instead.
	opts.ReconnectBufSize = -1
	// A link gone silent is found within three seconds, so a renewal's
	// reconnection does not wait for the two minutes of the default.
	opts.PingInterval = time.Second
	opts.MaxPingsOut = 3
	opts.ClosedCB, opts.DisconnectedCB, opts.DisconnectedErrCB = nil, nil, nil
	opts.ConnectedCB, opts.ReconnectedCB, opts.DiscoveredServersCB = nil, nil, nil
	opts.ReconnectErrCB, opts.LameDuckModeHandler, opts.ReconnectToServerCB = nil, nil, nil
	opts.AsyncErrorCB = s.asyncError
	opts.DisconnectedErrCB = s.disconnected
	conn, err := opts.Connect()
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
			strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			return mistake{fmt.Errorf("connect: %w", err)}
		}
		return fmt.Errorf("connect: %w", err)
	}
	s.conn = conn
	js, err := jetstream.New(conn)
	if err != nil {
		return mistake{fmt.Errorf("jetstream.New: %w", err)}
	}
	s.js = js
	kv, err := js.KeyValue(ctx, s.key.bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return mistake{fmt.Errorf("js.KeyValue(%q): %w: create it with natslease.BucketConfig", s.key.bucket, err)}
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		errors.Is(err, jetstream.ErrInvalidBucketName):
		return mistake{fmt.Errorf("js.KeyValue(%q): %w", s.key.bucket, err)}
	case errors.Is(err, nats.ErrPermissionViolation):
		return mistake{fmt.Errorf("js.KeyValue(%q): %w", s.key.bucket, err)}
	case err != nil:
		return fmt.Errorf("js.KeyValue(%q): %w", s.key.bucket, err)
	}
	s.kv = kv
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("kv.Status of bucket %q: %w", s.key.bucket, err)
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		cfg := bs.StreamInfo().Config
		if !cfg.AllowMsgTTL {
			// A server before 2.11 drops the field, and expires no key
			// by its own TTL: refused here, with the same words.
			return mistake{fmt.Errorf("kv.Status of bucket %q: the bucket does not allow per-key TTLs (its stream has no AllowMsgTTL: create it with LimitMarkerTTL, see natslease.BucketConfig, on nats-server 2.11 or later), so a key whose holder vanished would never expire", s.key.bucket)}
		}
		s.maxAge = cfg.MaxAge
	}
	wctx, stop := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx, jetstream.UpdatesOnly())
	if err != nil {
		stop()
		if errors.Is(err, nats.ErrPermissionViolation) {
			return mistake{fmt.Errorf("kv.WatchAll of bucket %q: %w", s.key.bucket, err)}
		}
		return fmt.Errorf("kv.WatchAll of bucket %q: %w", s.key.bucket, err)
	}
	s.watch, s.stop = w, stop
	s.work = make(chan *Lease, 1024)
	s.kick = make(chan struct{}, 1)
	s.wg.Add(2 + renewWorkers)
	go func() {
		defer s.wg.Done()
		s.follow(wctx, w)
	}()
	go func() {
		defer s.wg.Done()
		s.renewer(wctx)
	}()
	for range renewWorkers {
		go func() {
			defer s.wg.Done()
			s.worker(wctx)
		}()
	}
	return nil
}

// close stops the session's goroutines and closes its connection.
func (s *session) close() {
	s.stop()
	s.watch.Stop()
	s.wg.Wait()
	s.conn.Close()
	s.linkMu.Lock()
	s.linkCancel()
	s.linkMu.Unlock()
}

// errDisconnected is the failure of a renewal whose connection was lost
// before its answer came: the answer comes back on the connection that sent
// the request, so none can come.
var errDisconnected = errors.New("the session's connection was lost before the renewal's answer came")

// disconnected is the connection's handler of a disconnection: it cuts the
// renewals waiting for an answer on the connection lost, which are tried
// again on the next one instead of waiting for their deadline.
func (s *session) disconnected(*nats.Conn, error) {
	s.linkMu.Lock()
	defer s.linkMu.Unlock()
	s.linkCancel()
	s.linkCtx, s.linkCancel = context.WithCancel(context.Background())
}

// link returns a context that is cancelled when the session's connection
// is next lost.
func (s *session) link() context.Context {
	s.linkMu.Lock()
	defer s.linkMu.Unlock()
	return s.linkCtx
}

// hold makes the session renew and follow l.
func (s *session) hold(l *Lease) {
	s.mu.Lock()
	s.leases[l.key] = l
	s.mu.Unlock()
	s.wake()
}

// forget stops renewing and following l.
func (s *session) forget(l *Lease) {
	s.mu.Lock()
	if s.leases[l.key] == l {
		delete(s.leases, l.key)
	}
	s.mu.Unlock()
}

// wake makes the renewer look at its leases again.
func (s *session) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// A permWatch cancels a call's context when the server reports a
// permissions violation on the call's subject: the server answers such a
// publish with an asynchronous error, not a reply, and the call would
// otherwise wait out its context.
type permWatch struct {
	subject string
	cancel  context.CancelCauseFunc
}

// guard returns ctx, cut with the violation's error if the server refuses
// a publish to subject; release undoes it.
func (s *session) guard(ctx context.Context, subject string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &permWatch{subject: subject, cancel: cancel}
	s.mu.Lock()
	s.perms[w] = struct{}{}
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		delete(s.perms, w)
		s.mu.Unlock()
		cancel(nil)
	}
}

// asyncError is the connection's handler of asynchronous errors.
func (s *session) asyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.perms {
		if strings.Contains(err.Error(), `"`+w.subject+`"`) {
			w.cancel(mistake{err})
		}
	}
}

// refused returns the permissions violation that cut ctx, if one did.
func refused(ctx context.Context) error {
	if err := context.Cause(ctx); isMistake(err) {
		return err
	}
	return nil
}

// A backoff spaces out retries: from 20 ms, doubling, up to a ceiling,
// each wait drawn at random between half and all of it.
type backoff struct {
	next, ceiling time.Duration
}

func newBackoff(ceiling time.Duration) *backoff {
	return &backoff{next: 20 * time.Millisecond, ceiling: max(ceiling, 20*time.Millisecond)}
}

func (b *backoff) wait(ctx context.Context) error {
	d := b.next/2 + time.Duration(randInt64N(int64(b.next/2)+1))
	b.next = min(2*b.next, b.ceiling)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
