package mysqllease

import (
	"context"
	"database/sql"
	"sync"
)

// lockID names one lock: the server (its host name, port and server_id)
// and the lock's name. GET_LOCK's locks are the server's, not a database's.
type lockID struct {
	server string
	name   string
	proc   *sql.DB // nil, but in tests that make a pool's leases another process's
}

// apart holds the pools whose leases the tests take for another process's:
// the registry orders them apart from this process's other leases.
var apart sync.Map

// lockID returns the name in the registry of the lock name of server.
func (st *sessionSet) lockID(server, name string) lockID {
	id := lockID{server: server, name: name}
	if _, ok := apart.Load(st.db); ok {
		id.proc = st.db
	}
	return id
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

// sessionID names a server session of this process: its server and
// CONNECTION_ID(), and the pool kept apart in the tests.
type sessionID struct {
	server string
	id     int64
	proc   *sql.DB
}

// The shared sessions of this process that are open. A waiting Lock granted
// a lock that one of them held needs no grace: the registry of leases
// orders it after that session's lease.
var mine = struct {
	sync.Mutex
	m map[sessionID]struct{}
}{m: make(map[sessionID]struct{})}

// sessionID returns the name of the session s of st among this process's.
func (st *sessionSet) sessionID(s *session) sessionID {
	id := st.lockID(s.server, "")
	return sessionID{server: s.server, id: s.id, proc: id.proc}
}

// ownSession records an open shared session, and returns the func that
// ends the record.
func ownSession(id sessionID) func() {
	mine.Lock()
	mine.m[id] = struct{}{}
	mine.Unlock()
	return func() {
		mine.Lock()
		delete(mine.m, id)
		mine.Unlock()
	}
}

// isMine reports whether id is an open shared session of this process.
func isMine(id sessionID) bool {
	mine.Lock()
	defer mine.Unlock()
	_, ok := mine.m[id]
	return ok
}
