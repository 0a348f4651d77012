package k8slease

import (
	"container/heap"
	"errors"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/zukhruf/lease/controller"
)

// testSession returns a session whose run starts no goroutine: the tests
// hand events to dispatch themselves.
func testSession() (*session, *run) {
	r := &run{}
	s := &session{subs: make(map[string][]*sub), attempted: make(chan struct{}), wake: make(chan struct{}, 1), run: r}
	return s, r
}

func (s *session) testSub(name string) *sub {
	b := &sub{s: s, run: s.run, name: name, known: -1, wake: make(chan struct{}, 1)}
	s.subs[name] = append(s.subs[name], b)
	s.refs++
	return b
}

var acquiredAtTest = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// testLease returns a lease of name held by "a", acquired at acquiredAtTest.
func testLease(name string) *Lease {
	return &Lease{
		ctrl:     controller.New(name),
		name:     name,
		identity: "a",
		cfg:      Config{LeaseDuration: 2 * time.Second},
		acquired: acquiredAtTest,
		stop:     func() {},
		index:    -1,
	}
}

// record returns the Lease name at version rv, held by holder.
func record(name string, rv int64, holder string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	l.Name, l.ResourceVersion = name, strconv.FormatInt(rv, 10)
	setRecord(l, holder, 2, acquiredAtTest, acquiredAtTest, 0)
	return l
}

func woken(b *sub) bool {
	select {
	case <-b.wake:
		return true
	default:
		return false
	}
}

// TestSessionPushLosesOnlyItsLease: an event of a version later than the
// lease's write that names another holder loses that lease; an older event
// of its name, an event of the lease's own record, and an event of another
// name lose nothing.
func TestSessionPushLosesOnlyItsLease(t *testing.T) {
	s, r := testSession()
	x, y := s.testSub("x"), s.testSub("y")
	lx, ly := testLease("x"), testLease("y")
	x.hold(lx, 10)
	y.hold(ly, 10)
	s.dispatch(r, watch.Modified, record("x", 9, "before")) // the record before this lease's write
	s.dispatch(r, watch.Modified, record("x", 11, "a"))     // a renewal of its own
	if err := lx.ctrl.Signal().Err(); err != nil {
		t.Fatalf("Err() = %v after an older event and its own renewal, want nil", err)
	}
	s.dispatch(r, watch.Modified, record("x", 12, "operator"))
	if err := lx.ctrl.Signal().Err(); !errors.Is(err, ErrTakenOver) {
		t.Errorf("Err() = %v, want ErrTakenOver", err)
	}
	if err := ly.ctrl.Signal().Err(); err != nil {
		t.Errorf("the lease of another name: Err() = %v, want nil", err)
	}
	s.dispatch(r, watch.Deleted, record("y", 13, "a"))
	if err := ly.ctrl.Signal().Err(); !errors.Is(err, ErrDeleted) {
		t.Errorf("Err() = %v, want ErrDeleted", err)
	}
}

// TestSessionGrantSeesTheEventsBeforeIt: an event that came between a
// waiting Lock's read and its grant is checked at the grant: a later
// version naming another holder loses the new lease at once, an earlier
// one does not.
func TestSessionGrantSeesTheEventsBeforeIt(t *testing.T) {
	for _, tt := range []struct {
		name string
		rv   int64
		lost bool
	}{
		{"before the grant's write", 6, false},
		{"after the grant's write", 8, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, r := testSession()
			b := s.testSub("x")
			b.read(5)
			s.dispatch(r, watch.Modified, record("x", tt.rv, "other"))
			if !woken(b) {
				t.Error("the waiting Lock was not woken by an event after its read")
			}
			l := testLease("x")
			b.hold(l, 7)
			if err := l.ctrl.Signal().Err(); (err != nil) != tt.lost || (tt.lost && !errors.Is(err, ErrTakenOver)) {
				t.Errorf("Err() = %v, want lost: %v", err, tt.lost)
			}
		})
	}
}

// TestSessionReadWakesForAnEarlierEvent: an event that came while a waiting
// Lock's read was on its way wakes the Lock if it is later than what the
// read found, and not otherwise.
func TestSessionReadWakesForAnEarlierEvent(t *testing.T) {
	s, r := testSession()
	b := s.testSub("x")
	s.dispatch(r, watch.Modified, record("x", 4, "other"))
	s.dispatch(r, watch.Modified, record("x", 6, "other"))
	if woken(b) {
		t.Fatal("woken before its first read")
	}
	b.read(6)
	if woken(b) {
		t.Error("woken by events no later than its read")
	}
	s.dispatch(r, watch.Modified, record("x", 7, "free"))
	if !woken(b) {
		t.Error("not woken by an event after its read")
	}
}

// TestRenewalsHeap: the scheduler's heap gives the leases by their next
// renewal, and a lease removed from it is given no more.
func TestRenewalsHeap(t *testing.T) {
	var h renewals
	base := time.Now()
	leases := make([]*Lease, 5)
	for i, at := range []int{3, 1, 4, 0, 2} {
		leases[i] = testLease("x")
		leases[i].next = base.Add(time.Duration(at) * time.Second)
		heap.Push(&h, leases[i])
	}
	heap.Remove(&h, leases[2].index) // the one due at 4 s
	if leases[2].index != -1 {
		t.Errorf("index after Remove = %d, want -1", leases[2].index)
	}
	var got []time.Duration
	for h.Len() > 0 {
		got = append(got, heap.Pop(&h).(*Lease).next.Sub(base))
	}
	want := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("popped %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("popped %v, want %v", got, want)
		}
	}
}

// TestSessionLatestStandsForARead: a waiting Lock takes the newest version
// the watch delivered since its read in place of another read, a deletion
// as no Lease; nothing before its first read, nothing twice, and nothing
// after the watch missed events.
func TestSessionLatestStandsForARead(t *testing.T) {
	s, r := testSession()
	b := s.testSub("x")
	s.dispatch(r, watch.Modified, record("x", 4, "other"))
	if _, ok := b.latest(); ok {
		t.Fatal("latest before the first read: ok, want none")
	}
	b.read(4)
	s.dispatch(r, watch.Modified, record("x", 5, "other"))
	s.dispatch(r, watch.Modified, record("x", 6, "other"))
	cur, ok := b.latest()
	if !ok || cur == nil || cur.ResourceVersion != "6" {
		t.Fatalf("latest = %v, %v, want version 6", cur, ok)
	}
	cur.Spec.HolderIdentity = nil // the caller's copy
	if _, ok := b.latest(); ok {
		t.Error("latest again with no event since: ok, want none")
	}
	s.dispatch(r, watch.Deleted, record("x", 7, "other"))
	if cur, ok := b.latest(); !ok || cur != nil {
		t.Errorf("latest after a deletion = %v, %v, want nil, true", cur, ok)
	}
	s.dispatch(r, watch.Modified, record("x", 8, "other"))
	s.gone(r)
	if _, ok := b.latest(); ok {
		t.Error("latest after the watch missed events: ok, want a read")
	}
}
