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
		live.Lock()
		gone, held := live.m[id]
		if !held {
			gone = make(chan struct{})
			live.m[id] = gone
			live.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					live.Lock()
					delete(live.m, id)
					live.Unlock()
					close(gone)
				})
			}, nil
		}
		live.Unlock()
		select {
		case <-gone:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
