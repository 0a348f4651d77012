package s3lease

import (
	"container/heap"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/minio/minio-go/v7"
)

// renewers is how many renewals of one client's leases may be in flight at
// once: S3 has no batch write, so a thousand leases are a thousand PUTs a
// RenewPeriod, spread over these goroutines.
const renewers = 8

// A session is what the leases of one *minio.Client share: the probe's
// verdict for each bucket, one scheduler that renews every lease through
// at most [renewers] goroutines, and the wake-ups of the client's waiting
// Locks when one of its leases is released. Its goroutines run only while
// it holds a lease.
type session struct {
	mu      sync.Mutex
	probes  map[string]*probe // by bucket
	due     dueHeap           // the held leases, by next renewal
	running bool              // the scheduler runs
	busy    int               // leases out with a renewer
	poke    chan struct{}     // tells the scheduler that due changed
	waiters map[string]map[chan struct{}]struct{}
}

var sessions struct {
	sync.Mutex
	m map[weak.Pointer[minio.Client]]*session
}

// sessionOf returns the session of client. It does not keep client alive:
// the entry goes when client is collected.
func sessionOf(client *minio.Client) *session {
	k := weak.Make(client)
	sessions.Lock()
	defer sessions.Unlock()
	if s := sessions.m[k]; s != nil {
		return s
	}
	if sessions.m == nil {
		sessions.m = make(map[weak.Pointer[minio.Client]]*session)
	}
	s := &session{
		probes:  make(map[string]*probe),
		poke:    make(chan struct{}, 1),
		waiters: make(map[string]map[chan struct{}]struct{}),
	}
	sessions.m[k] = s
	runtime.AddCleanup(client, func(k weak.Pointer[minio.Client]) {
		sessions.Lock()
		delete(sessions.m, k)
		sessions.Unlock()
	}, k)
	return s
}

// hold schedules l's renewals, starting the scheduler if it is not
// running.
func (s *session) hold(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	heap.Push(&s.due, l)
	if !s.running {
		s.running = true
		go s.schedule()
	}
	s.signal()
}

// forget stops l's renewals; a renewal in flight ends on its own.
func (s *session) forget(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.index >= 0 {
		heap.Remove(&s.due, l.index)
		s.signal()
	}
}

func (s *session) signal() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// schedule hands each lease, when its renewal is due, to one of the
// renewers, and returns when the session holds no lease: its goroutine and
// the renewers' then end.
func (s *session) schedule() {
	work := make(chan *Lease)
	var wg sync.WaitGroup
	for range renewers {
		wg.Go(func() {
			for l := range work {
				s.requeue(l, l.renew())
			}
		})
	}
	defer wg.Wait()
	defer close(work)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if len(s.due) == 0 && s.busy == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		var next *Lease
		wait := time.Hour
		if len(s.due) > 0 {
			if d := time.Until(s.due[0].next); d <= 0 {
				next = heap.Pop(&s.due).(*Lease)
				s.busy++
			} else {
				wait = d
			}
		}
		s.mu.Unlock()
		if next != nil {
			work <- next
			continue
		}
		timer.Reset(wait)
		select {
		case <-s.poke:
		case <-timer.C:
		}
	}
}

// requeue puts l back after its renewal, due at next, unless it was lost
// or released meanwhile. The scheduler runs while a lease is out with a
// renewer (s.busy), so that requeue always finds it running.
func (s *session) requeue(l *Lease, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	if !l.done() {
		l.next = next
		heap.Push(&s.due, l)
	}
	s.signal()
}

// wait returns a channel that release closes when a lease of this session
// on object is released, and the func that stops waiting.
func (s *session) wait(object string) (<-chan struct{}, func()) {
	c := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiters[object] == nil {
		s.waiters[object] = make(map[chan struct{}]struct{})
	}
	s.waiters[object][c] = struct{}{}
	return c, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.waiters[object][c]; ok {
			delete(s.waiters[object], c)
			if len(s.waiters[object]) == 0 {
				delete(s.waiters, object)
			}
		}
	}
}

// release wakes every Lock of this session waiting on object.
func (s *session) release(object string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.waiters[object] {
		close(c)
	}
	delete(s.waiters, object)
}

// dueHeap orders leases by their next renewal.
type dueHeap []*Lease

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	l := x.(*Lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *dueHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.index = -1
	*h = old[:len(old)-1]
	return l
}
