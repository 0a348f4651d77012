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

// tryClaim records the caller as the holder of id if no lease of this
// process holds it, as claim does, and otherwise reports false at once.
func tryClaim(id lockID) (unclaim func(), ok bool) {
	unclaim, _ = record(id)
	return unclaim, unclaim != nil
}

// record records the caller as the holder of id and returns the func that
// removes the record; if a lease of this process holds id, it returns a nil
// func and the channel closed when that lease's record is removed.
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
