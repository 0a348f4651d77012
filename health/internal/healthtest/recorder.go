package healthtest

import (
	"sync"

	"github.com/zukhruf/lease/health"
)

// recorder keeps the events it observes and passes them on.
type recorder struct {
	next    health.Observer
	renewed chan struct{}

	mu     sync.Mutex
	events []health.Event
}

func (r *recorder) Observe(e health.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if r.next != nil {
		r.next.Observe(e)
	}
	if e.Kind == health.Renewed {
		select {
		case r.renewed <- struct{}{}:
		default:
		}
	}
}

func (r *recorder) all() []health.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]health.Event(nil), r.events...)
}

// Tee is an Observer that tells each of its Observers in turn.
type Tee []health.Observer

// Observe tells each Observer of t.
func (t Tee) Observe(e health.Event) {
	for _, o := range t {
		o.Observe(e)
	}
}
