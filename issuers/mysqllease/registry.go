package mysqllease

import (
	"context"
	"sync"
)

// lockID names one lock: the server (its host name, port and server_id)
// and the lock's name. GET_LOCK's locks are the server's, not a database's.
type lockID struct {
	server string
	name   string
}

// The leases of this process that are live, by lock. The server frees a
// session's lock, and may grant it to another session of this process,
// before the old holder's lease reads the end of its connection; a Lock
// granted by the server waits here until the process's previous lease of the
// same lock is lost or ended.
var live = struct {
	sync.Mutex
	m map[lockID]chan struct{}
}{m: make(map[lockID]chan struct{})}

// claim waits until no lease of this process holds id, then records the
// caller as its holder and returns the func that removes the record. The
// returned func is idempotent. claim returns ctx's error if ctx ends first.
func claim(ctx context.Context, id lockID) (unclaim func(), err error) {
	for {
		unclaim, gone := record(id)
		if unclaim != nil {
			return unclaim, nil
		}
		select {
		case <-gone:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// tryClaim records the caller as id's holder, as claim does, unless a lease
// of this process holds id: then it reports false at once.
func tryClaim(id lockID) (unclaim func(), ok bool) {
	unclaim, _ = record(id)
	return unclaim, unclaim != nil
}

// record records the caller as id's holder and returns the func that
// removes the record; or, when a lease of this process holds id, a nil func
// and the channel that is closed when that lease's record is removed.
func record(id lockID) (unclaim func(), gone <-chan struct{}) {
	live.Lock()
	defer live.Unlock()
	if held, ok := live.m[id]; ok {
		return nil, held
	}
	ch := make(chan struct{})
	live.m[id] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			live.Lock()
			delete(live.m, id)
			live.Unlock()
			close(ch)
		})
	}, nil
}
