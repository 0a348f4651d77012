package pglease

import (
	"context"
	"sync"
)

// lockID names one advisory lock: the server's system identifier (the same
// on a primary and on the standbys made from it), the database and the key.
type lockID struct {
	system string
	db     uint32
	key    int64
}

// The leases of this process that are live, by lock. PostgreSQL frees a
// session's lock, and may grant it to another session of this process, before
// the old holder's lease reads the FATAL or the EOF that tells it; a Lock
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
