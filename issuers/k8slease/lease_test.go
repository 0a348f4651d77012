package k8slease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
	"github.com/zukhruf/lease/lost"
)

// short is the configuration of most tests: a 2 s lease.
var short = k8slease.Config{LeaseDuration: 2 * time.Second}

// watched is the configuration of the tests that want a change of the
// record seen by the watch: the first renewal comes 9 s or more after the
// grant, so a renewal cannot meet an operator's write made just after it,
// and the watch is the only way the lease can learn of it in time.
var watched = k8slease.Config{LeaseDuration: 20 * time.Second, RenewPeriod: 10 * time.Second}

func TestLockWritesClientGoRecord(t *testing.T) {
	cs := clientset(t, shared.Config())
	name := leaseName(t)
	l := mustLock(t, short, cs, name, "a")
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("Err() = %v, want nil", err)
	}
	cur, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := cur.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity != "a" || s.LeaseDurationSeconds == nil || *s.LeaseDurationSeconds != 2 ||
		s.AcquireTime == nil || s.RenewTime == nil || s.LeaseTransitions == nil || *s.LeaseTransitions != 0 {
		t.Errorf("record = %+v, want holder a, 2 s, acquire and renew times, 0 transitions", s)
	}
	if got := l.Signal().String(); !strings.Contains(got, ns+"/"+name) {
		t.Errorf("Signal().String() = %q, want the subject %s/%s", got, ns, name)
	}
	if l.Token() <= 0 {
		t.Errorf("Token() = %d, want a positive resourceVersion", l.Token())
	}
}

// TestRenewalsKeepTheLease holds a 2 s lease for three lease durations:
// without its renewals another candidate would take it over.
func TestRenewalsKeepTheLease(t *testing.T) {
	cs := clientset(t, shared.Config())
	name := leaseName(t)
	a := mustLock(t, short, cs, name, "a")
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
	defer cancel()
	b := lockAsync(ctx, short, clientset(t, shared.Config()), name, "b")
	select {
	case g := <-b:
		if g.err == nil {
			g.l.Unlock(context.Background())
		}
		t.Fatalf("B's Lock returned %v while A held and renewed the lease", g.err)
	case <-a.Signal().Done():
		t.Fatalf("A was lost: %v", a.Signal().Err())
	case <-ctx.Done():
	}
	if g := <-b; !errors.Is(g.err, context.DeadlineExceeded) {
		t.Errorf("B's Lock = %v, want context.DeadlineExceeded", g.err)
	}
	if err := a.Signal().Err(); err != nil {
		t.Errorf("A: Err() = %v, want nil", err)
	}
}

// TestUnlockGrantsAWaiterAtOnce uses a lease of a minute: a waiter granted
// within the test's 30 s did not wait for the lease to expire.
func TestUnlockGrantsAWaiterAtOnce(t *testing.T) {
	long := k8slease.Config{LeaseDuration: time.Minute}
	name := leaseName(t)
	a := mustLock(t, long, clientset(t, shared.Config()), name, "a")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b := lockAsync(ctx, long, clientset(t, shared.Config()), name, "b")
	time.Sleep(500 * time.Millisecond) // B reads the record and waits
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatalf("A's Unlock = %v", err)
	}
	g := <-b
	if g.err != nil {
		t.Fatalf("B's Lock = %v, want the lease within 30 s of a 60 s lease", g.err)
	}
	defer g.l.Unlock(context.Background())
	if err := a.Signal().Err(); err != nil {
		t.Errorf("A after Unlock: Err() = %v, want nil (a release is never a loss)", err)
	}
	if g.l.Token() <= a.Token() {
		t.Errorf("B's token %d is not larger than A's %d", g.l.Token(), a.Token())
	}
	if err := a.Unlock(t.Context()); err != nil {
		t.Errorf("A's second Unlock = %v, want the first call's nil", err)
	}
}

func TestOperatorChangeLosesTheLease(t *testing.T) {
	tests := []struct {
		name   string
		change func(*coordinationv1.Lease)
		ours   bool // the record still names the holder, so Unlock writes it free
	}{
		{"holder overwritten", func(l *coordinationv1.Lease) { s := "operator"; l.Spec.HolderIdentity = &s }, false},
		// client-go's ReleaseOnCancel, run by a candidate that took its
		// cached record for its own: no holder, a lease of one second.
		// A candidate waits for the duration the record states.
		{"lease duration shortened", func(l *coordinationv1.Lease) { one := int32(1); l.Spec.LeaseDurationSeconds = &one }, true},
		{"released as client-go does", func(l *coordinationv1.Lease) {
			s, one := "", int32(1)
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &s, &one
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := clientset(t, shared.Config())
			name := leaseName(t)
			a := mustLock(t, watched, cs, name, "a")
			edit(t, cs, name, tt.change)
			err := waitLost(t, a, 8*time.Second) // before the first renewal could tell
			if !isLost(err, k8slease.ErrTakenOver) {
				t.Fatalf("Err() = %v, want ErrTakenOver", err)
			}
			if !strings.Contains(err.Error(), "now records") {
				t.Errorf("Err() = %v, want it seen by the watch", err)
			}
			var le *lost.Error
			if !errors.As(err, &le) || le.Subject() != ns+"/"+name {
				t.Errorf("Err() = %v, want a *lost.Error of %s/%s", err, ns, name)
			}
			before := holderOf(t, cs, name)
			if err := a.Unlock(t.Context()); err != nil {
				t.Errorf("Unlock = %v", err)
			}
			want := before
			if tt.ours {
				want = ""
			}
			if got := holderOf(t, cs, name); got != want {
				t.Errorf("Unlock of the lost lease left the holder %q, want %q", got, want)
			}
		})
	}
}

func TestDeletionLosesTheLease(t *testing.T) {
	cs := clientset(t, shared.Config())
	name := leaseName(t)
	a := mustLock(t, short, cs, name, "a")
	if err := cs.CoordinationV1().Leases(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitLost(t, a, 5*time.Second); !isLost(err, k8slease.ErrDeleted) {
		t.Fatalf("Err() = %v, want ErrDeleted", err)
	}
}

// TestTokenGrowsAcrossDeletion: leaseTransitions starts again at 0 when the
// Lease is made anew; the token does not.
func TestTokenGrowsAcrossDeletion(t *testing.T) {
	cs := clientset(t, shared.Config())
	name := leaseName(t)
	a := mustLock(t, short, cs, name, "a")
	b := lockAsync(t.Context(), short, clientset(t, shared.Config()), name, "b")
	time.Sleep(200 * time.Millisecond)
	if err := cs.CoordinationV1().Leases(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLost(t, a, 5*time.Second)
	g := <-b
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer g.l.Unlock(context.Background())
	cur, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *cur.Spec.LeaseTransitions != 0 {
		t.Errorf("leaseTransitions of the new Lease = %d, want 0", *cur.Spec.LeaseTransitions)
	}
	if g.l.Token() <= a.Token() {
		t.Errorf("token after the deletion %d, want larger than %d", g.l.Token(), a.Token())
	}
}

// TestLockCutByContextLeavesNothing cuts a waiting Lock and checks that no
// goroutine of it is left and the Lease still names its holder.
func TestLockCutByContextLeavesNothing(t *testing.T) {
	// The holder runs in a child process: a lease of this process would
	// open its watch in its own time and look like a leak of the Lock cut.
	name := leaseName(t)
	holder := kubetest.StartChild(t, shared.Config(), "holder", name, "")
	start, stop := context.WithTimeout(t.Context(), time.Minute)
	ev, err := holder.Next(start)
	stop()
	if err != nil || !strings.HasPrefix(ev.Text, "token ") {
		t.Fatalf("the holder said %q, %v; want its token", ev.Text, err)
	}
	defer holder.Send("unlock")
	cs := clientset(t, shared.Config())
	before := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(t.Context())
	b := lockAsync(ctx, short, cs, name, "b")
	time.Sleep(300 * time.Millisecond)
	cancel()
	if g := <-b; !errors.Is(g.err, context.Canceled) {
		t.Fatalf("Lock = %v, want context.Canceled", g.err)
	}
	// A stopped watch's stream ends a moment later, a longer one on a
	// loaded machine than goleak's own retries wait for.
	for range 20 {
		if err = goleak.Find(append(kubetest.IgnoreGoroutines(), before)...); err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("a cut Lock left goroutines: %v", err)
	}
	if got := holderOf(t, cs, name); got != "paused" {
		t.Errorf("holder = %q, want the child's, paused", got)
	}
}

// TestSilenceLosesAtTheDeadline drops every byte between A and the
// apiserver, connections open: A is lost at its deadline, with the cause
// naming it, before B is granted.
func TestSilenceLosesAtTheDeadline(t *testing.T) {
	p, err := faultnet.Listen(shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	name := leaseName(t)
	a := mustLock(t, short, clientset(t, shared.ConfigVia(p.Addr())), name, "a")
	b := lockAsync(t.Context(), short, clientset(t, shared.Config()), name, "b")
	time.Sleep(300 * time.Millisecond)
	p.Drop(faultnet.Both)
	err = waitLost(t, a, 10*time.Second)
	lostAt := time.Now()
	if !isLost(err, k8slease.ErrRenewalUnconfirmed) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Err() = %v, want ErrRenewalUnconfirmed naming the deadline", err)
	}
	g := <-b
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer g.l.Unlock(context.Background())
	if !g.at.After(lostAt) {
		t.Errorf("B was granted %v before A was lost", lostAt.Sub(g.at))
	}
}

// TestWatchEndIsNotALoss runs an apiserver that ends every watch after one
// to two seconds: the lease lives on through several ends, and a change of
// its holder is still seen by the watch. The operator writes just after a
// renewal the test saw applied, the next one is 9 s or more away.
func TestWatchEndIsNotALoss(t *testing.T) {
	s := kubetest.Options{MinRequestTimeout: time.Second}.Start(t)
	cs := clientset(t, s.Config())
	name := leaseName(t)
	a := mustLock(t, watched, cs, name, "a")
	granted := renewTime(t, cs, name)
	for renewTime(t, cs, name).Equal(granted) {
		select {
		case <-a.Signal().Done():
			t.Fatalf("lost while its watch ended: %v", a.Signal().Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	edit(t, cs, name, func(l *coordinationv1.Lease) { s := "operator"; l.Spec.HolderIdentity = &s })
	err := waitLost(t, a, 8*time.Second)
	if !isLost(err, k8slease.ErrTakenOver) || !strings.Contains(err.Error(), "now records") {
		t.Fatalf("Err() = %v, want ErrTakenOver seen by the watch", err)
	}
}

// TestStopRenewingRunsOut stops a holder's renewals without a release: its
// signal is lost at its deadline, the record still names it until then,
// and a waiting candidate is granted only after the loss.
func TestStopRenewingRunsOut(t *testing.T) {
	cfg := k8slease.Config{LeaseDuration: 2 * time.Second}
	cs := clientset(t, shared.Config())
	name := leaseName(t)
	a := mustLock(t, cfg, cs, name, "a")
	a.StopRenewing()
	a.StopRenewing() // a second call does nothing more
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := lockAsync(ctx, cfg, clientset(t, shared.Config()), name, "b")
	if got := holderOf(t, cs, name); got != "a" {
		t.Fatalf("after StopRenewing the record names %q, want a: nothing is released", got)
	}
	err := waitLost(t, a, 5*time.Second)
	lostAt := time.Now()
	if !isLost(err, k8slease.ErrRenewalUnconfirmed) {
		t.Fatalf("after StopRenewing the lease was lost with %v, want ErrRenewalUnconfirmed", err)
	}
	g := <-b
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer g.l.Unlock(context.Background())
	if g.at.Before(lostAt) {
		t.Fatalf("b was granted %v before a's signal was lost", lostAt.Sub(g.at))
	}
	if g.l.Token() <= a.Token() {
		t.Fatalf("b's token %d is not larger than a's %d", g.l.Token(), a.Token())
	}
}
