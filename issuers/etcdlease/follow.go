package etcdlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// askTimeout bounds the read of the key after etcd compacted the history a
// watch was to start from. The read decides whether the claim stands; the
// local deadline goes on running while it waits.
const askTimeout = time.Second

// watcher follows the keys of every lease of a shared on one watch stream
// of its own, one etcd watcher per key on it: a lease adds a create request
// and, at its end, a cancel request, and costs no goroutine. It loses a
// lease when its key is deleted or put again bound to another etcd lease,
// and every lease when the stream ends for good (the member lost its
// leader, etcd refused the stream). A stream that breaks otherwise is
// opened again, with backoff, and each key's watch resumes from the
// revision after the last it saw, as etcd's client resumes its watches.
//
// Every loss is made with the cause known at that moment: no question to
// etcd runs between learning that the claim is gone and the loss, since
// another holder may be granted the claim at once.
type watcher struct {
	sh *shared
	wc pb.WatchClient

	resyncs sync.WaitGroup // the reads after a compaction
	wanted  chan struct{}  // has a value once a lease was added

	mu     sync.Mutex
	byID   map[int64]*Lease // the leases followed, by watch ID
	nextID int64
	st     *watchStream // the stream up, nil while none is
}

// watchStream is what the watcher sends on one stream, and the creates it
// sent and etcd has not answered yet; watcher.mu guards it.
type watchStream struct {
	queue   []*pb.WatchRequest
	pending []int64       // the watch IDs of the creates not yet answered, in order
	wake    chan struct{} // has a value when the queue has
}

func newWatcher(sh *shared) *watcher {
	var wc pb.WatchClient
	if conn := sh.s.Client().ActiveConnection(); conn != nil {
		wc = pb.NewWatchClient(conn)
	}
	return &watcher{sh: sh, wc: wc, byID: make(map[int64]*Lease), wanted: make(chan struct{}, 1)}
}

// add follows l's key from the revision after its grant. The watch starts
// after the revision the claim was granted at, so no event between the
// grant and the watch's creation is missed.
func (w *watcher) add(l *Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	l.wid, l.next = w.nextID, l.granted+1
	w.byID[l.wid] = l
	if w.st != nil {
		w.st.create(l)
	}
	select {
	case w.wanted <- struct{}{}:
	default:
	}
}

// remove stops following l's key.
func (w *watcher) remove(l *Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID[l.wid] != l {
		return
	}
	delete(w.byID, l.wid)
	if w.st != nil && l.next > 0 {
		w.st.cancel(l.wid)
	}
}

func (ws *watchStream) create(l *Lease) {
	ws.queue = append(ws.queue, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(l.key), StartRevision: l.next, WatchId: l.wid,
	}}})
	ws.pending = append(ws.pending, l.wid)
	ws.poke()
}

func (ws *watchStream) cancel(id int64) {
	ws.queue = append(ws.queue, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
	ws.poke()
}

func (ws *watchStream) poke() {
	select {
	case ws.wake <- struct{}{}:
	default:
	}
}

// run follows the keys on one stream after another until ctx ends.
func (w *watcher) run(ctx context.Context) {
	defer w.resyncs.Wait()
	if w.wc == nil {
		return
	}
	// The stream opens with the first lease: a shared whose Lock waits
	// for a cluster that does not answer asks it nothing more.
	select {
	case <-ctx.Done():
		return
	case <-w.wanted:
	}
	pause := retryFirst
	for {
		answered, err := w.serve(ctx)
		if ctx.Err() != nil {
			return
		}
		// As etcd's client ends its watches: a member without a leader
		// (WithRequireLeader), or an error that retrying cannot heal.
		if rpctypes.Error(err) == rpctypes.ErrNoLeader || !retriable(err) {
			w.sh.loseAll(fmt.Errorf("%w: the watch on the session's keys ended: %w", ErrClusterLost, err))
		}
		if answered {
			pause = retryFirst
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, retryMax)
	}
}

// retriable reports whether a stream that ended with err may be opened
// again: etcd's client retries Unavailable and Internal.
func retriable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.Internal
}

// serve follows the keys on one stream until it fails or ctx ends, and
// returns whether etcd answered on it and why it ended.
func (w *watcher) serve(ctx context.Context) (answered bool, ended error) {
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	st, err := w.wc.Watch(sctx)
	if err != nil {
		return false, err
	}
	ws := &watchStream{wake: make(chan struct{}, 1)}
	w.mu.Lock()
	w.st = ws
	for _, l := range w.byID {
		if l.next > 0 {
			ws.create(l)
		}
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.st = nil
		w.mu.Unlock()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel() // a failed send fails the stream
		for {
			select {
			case <-sctx.Done():
				return
			case <-ws.wake:
			}
			w.mu.Lock()
			q := ws.queue
			ws.queue = nil
			w.mu.Unlock()
			for _, req := range q {
				if st.Send(req) != nil {
					return
				}
			}
		}
	}()
	for {
		resp, err := st.Recv()
		if err != nil {
			if ctx.Err() == nil && sctx.Err() != nil {
				err = fmt.Errorf("send a watch request: %w", err)
			}
			return answered, err
		}
		answered = true
		w.handle(ctx, ws, resp)
	}
}

// handle acts on one answer of etcd on stream ws.
func (w *watcher) handle(ctx context.Context, ws *watchStream, resp *pb.WatchResponse) {
	w.mu.Lock()
	id := resp.WatchId
	if resp.Created {
		// etcd answers the creates of a stream in order, and a refused
		// one with no ID.
		if len(ws.pending) == 0 {
			w.mu.Unlock()
			return
		}
		id = ws.pending[0]
		ws.pending = ws.pending[1:]
	}
	l := w.byID[id]
	if l == nil || l.next == 0 {
		w.mu.Unlock() // released, or waiting for its read after a compaction
		return
	}
	if resp.CompactRevision != 0 {
		// etcd compacted the history the watch was to start from: the
		// revision Campaign reports as the grant, as etcd's election
		// does, is its put, before the wait behind the leaders, and a
		// stream opened again resumes where it was. The key as it is now
		// tells whether the claim stands.
		l.next = 0
		ws.cancel(id)
		w.resyncs.Add(1)
		w.mu.Unlock()
		go w.resync(ctx, l, id)
		return
	}
	if resp.Canceled {
		delete(w.byID, id)
		w.mu.Unlock()
		l.lose(fmt.Errorf("%w: etcd ended the watch on %s: %s", ErrClusterLost, quote(l.key), resp.CancelReason))
		return
	}
	w.mu.Unlock()
	if resp.Created || len(resp.Events) == 0 {
		return
	}
	s := w.sh.s
	for _, ev := range resp.Events {
		if ev.Type == mvccpb.DELETE {
			l.lose(l.keyDeleted(fmt.Sprintf("at revision %d", ev.Kv.ModRevision)))
			return
		}
		// A put that keeps the key's create revision and the session's
		// etcd lease is the claim updated (an election's Proclaim). Any
		// other put binds the key to another lease, or to none, or is a
		// new key: the key no longer lives and dies with the session.
		if ev.Kv.CreateRevision != l.rev || clientv3.LeaseID(ev.Kv.Lease) != s.Lease() {
			l.lose(fmt.Errorf("%w: %s put at revision %d with create revision %d and etcd lease %x, not %d and %x",
				ErrKeyTakenOver, quote(l.key), ev.Kv.ModRevision, ev.Kv.CreateRevision, ev.Kv.Lease, l.rev, s.Lease()))
			return
		}
	}
	w.mu.Lock()
	if l.next > 0 {
		l.next = resp.Events[len(resp.Events)-1].Kv.ModRevision + 1
	}
	w.mu.Unlock()
}

// resync reads l's key after etcd compacted the history its watch, of ID
// old, was to start from, and follows it again from the revision read, or
// loses l if the claim is gone.
func (w *watcher) resync(ctx context.Context, l *Lease, old int64) {
	defer w.resyncs.Done()
	from, err := l.resync(ctx, w.sh.s)
	if err != nil {
		l.lose(err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID[old] != l {
		return // released meanwhile
	}
	delete(w.byID, old)
	w.nextID++
	l.wid, l.next = w.nextID, from
	w.byID[l.wid] = l
	if w.st != nil {
		w.st.create(l)
	}
}

// sessionEnded returns the cause of the end of session s, from what the
// renewer r knows without asking: the session's client was closed, etcd
// answered a renewal that it has no lease of the session, or the session
// stopped renewing a lease etcd still had at the last confirmed renewal.
func sessionEnded(s *concurrency.Session, r *renewer) error {
	switch {
	case s.Client().Ctx().Err() != nil:
		return fmt.Errorf("%w: the etcd client of session %x was closed", ErrClusterLost, s.Lease())
	case r != nil && r.gone():
		return fmt.Errorf("%w: etcd has no lease %x any more", ErrSessionExpired, s.Lease())
	case r == nil:
		return fmt.Errorf("%w: session %x stopped renewing its etcd lease", ErrSessionClosed, s.Lease())
	default:
		return fmt.Errorf("%w: session %x stopped renewing its etcd lease; %s", ErrSessionClosed, s.Lease(), r.lastConfirmed())
	}
}

// keyDeleted returns the cause of the deletion of the key, which when tells
// ("at revision 7"). etcd deletes the key with the session's etcd lease when
// someone revokes it, and publishes nothing else that tells that deletion
// from one made by hand; the lease reports ErrSessionExpired only if a
// renewal already told it that etcd has no lease of the session.
func (l *Lease) keyDeleted(when string) error {
	if l.renew.gone() {
		return fmt.Errorf("%w: etcd has no lease %x any more and deleted %s with it %s",
			ErrSessionExpired, l.renew.id, quote(l.key), when)
	}
	return fmt.Errorf("%w: %s deleted %s, by hand or with the session's etcd lease %x if it was revoked",
		ErrKeyDeleted, quote(l.key), when, l.renew.id)
}

// resync reads the holder's key after the watch lost the history it was to
// start from, and returns the revision to watch from, or the cause of the
// loss if the claim is gone.
func (l *Lease) resync(ctx context.Context, s *concurrency.Session) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	resp, err := s.Client().Get(rctx, l.key)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: etcd compacted the history of the watch on %s and did not answer: %w", ErrClusterLost, quote(l.key), err)
	case len(resp.Kvs) == 0:
		return 0, l.keyDeleted(fmt.Sprintf("by revision %d", resp.Header.Revision))
	}
	if kv := resp.Kvs[0]; kv.CreateRevision != l.rev || clientv3.LeaseID(kv.Lease) != s.Lease() {
		return 0, fmt.Errorf("%w: %s found at revision %d with create revision %d and etcd lease %x, not %d and %x",
			ErrKeyTakenOver, quote(l.key), resp.Header.Revision, kv.CreateRevision, kv.Lease, l.rev, s.Lease())
	}
	return resp.Header.Revision + 1, nil
}
