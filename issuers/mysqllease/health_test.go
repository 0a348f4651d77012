package mysqllease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/mysqllease"
	"github.com/zukhruf/lease/lost"
)

// TestObserverEvents: a lease's observer is told of its grant, its
// session's confirmations in order, and its release; another's, of its
// grant and its loss when an operator kills its session.
func TestObserverEvents(t *testing.T) {
	admin := rootDB(t, server)
	db := open(t, server.DSN("root", ""))
	rec := &healthrec.Recorder{}
	cfg := fast
	cfg.Observer = rec
	subj := subject(t)
	l := lock(t, cfg, db, subj)
	rec.WaitFor(t, health.Renewed, 2)
	h := l.Health()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := rec.Events()
	renewals, err := healthrec.Renewals(all)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, e := range renewals {
		if e.Sent.Before(last) || e.Deadline.Sub(e.Sent) != time.Second {
			t.Errorf("renewed: sent %v after %v, deadline %v after it; want later sends, ServerTimeout less Margin", e.Sent, last, e.Deadline.Sub(e.Sent))
		}
		last = e.Sent
	}
	if g := all[0]; g.Subject != subj || g.Token != l.Token() || g.Issuer != "mysqllease" || g.Wait <= 0 {
		t.Errorf("granted = %+v, want the subject, token %d, a wait", g, l.Token())
	}
	if h.Deadline.Sub(h.Renewed) != time.Second || h.Margin <= 0 {
		t.Errorf("Health() = %+v, want the deadline 1 s after the confirmation, a margin > 0", h)
	}

	rec2 := &healthrec.Recorder{}
	cfg.Observer = rec2
	l2 := lock(t, cfg, open(t, server.DSN("root", "")), subject(t))
	if _, err := admin.ExecContext(t.Context(), fmt.Sprintf("KILL CONNECTION %d", sessionOf(t, admin, l2))); err != nil {
		t.Fatal(err)
	}
	waitLost(t, l2)
	all = rec2.WaitFor(t, health.Lost, 1)
	loss := all[len(all)-1]
	var le *lost.Error
	if !errors.As(loss.Err, &le) || loss.Err != l2.Signal().Err() || loss.Via != health.Push {
		t.Errorf("lost = %v via %v, want the signal's error via push", loss.Err, loss.Via)
	}
	if all[0].Kind != health.Granted || slices.ContainsFunc(all[1:len(all)-1], func(e health.Event) bool { return e.Kind == health.Lost || e.Kind == health.Released }) {
		t.Errorf("events = %v, want the grant first and one loss last", healthrec.Kinds(all))
	}
	l2.Unlock(context.Background())
	if n := len(rec2.Events()); n != len(all) {
		t.Errorf("the Unlock of a lost lease reported %d events more", n-len(all))
	}
}

// TestUnlockCancelledContextHandsOver: an Unlock whose context was
// cancelled still sends its release, and says it did: nil, and a waiting
// Lock of another pool is granted at once.
func TestUnlockCancelledContextHandsOver(t *testing.T) {
	admin := rootDB(t, server)
	da, dbb := open(t, server.DSN("root", "")), open(t, server.DSN("root", ""))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	subj := subject(t)
	a := lock(t, fast, da, subj)
	ch := lockAsync(t, admin, fast, dbb, subj)
	start := time.Now()
	if err := a.Unlock(ctx); err != nil {
		t.Errorf("Unlock(cancelled context) = %v, want nil: the release went through", err)
	}
	g := <-ch
	if g.err != nil {
		t.Fatalf("the waiting Lock = %v", g.err)
	}
	t.Logf("Unlock(cancelled context) → waiting Lock granted in %v", g.at.Sub(start))
	if took := g.at.Sub(start); took >= fast.ServerTimeout {
		t.Errorf("the waiting Lock was granted %v after the Unlock, not by its release", took)
	}
	g.lease.Unlock(context.Background())
}

// TestHeartbeatAnsweredWithError: heartbeats that the server answers with
// an error of the statement alone fail without losing the lease: each is
// told as RenewalFailed, then AtRisk, with the deadline in force, and the
// heartbeats go on, confirming the session again once the server accepts
// them.
func TestHeartbeatAnsweredWithError(t *testing.T) {
	db := open(t, server.DSN("root", ""))
	rec := &healthrec.Recorder{}
	cfg := mysqllease.Config{ServerTimeout: 4 * time.Second, Heartbeat: 100 * time.Millisecond, Observer: rec}
	l := lock(t, cfg, db, subject(t))
	defer l.Unlock(context.Background())
	rec.WaitFor(t, health.Renewed, 2)
	mysqllease.BreakHeartbeats(db, 2)
	all := rec.WaitFor(t, health.RenewalFailed, 2)
	before := len(all)
	for {
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("the lease was lost: %v: %v", err, healthrec.Kinds(rec.Events()))
		}
		all = rec.Events()
		renewed := 0
		for _, e := range all[before:] {
			if e.Kind == health.Renewed {
				renewed++
			}
		}
		if renewed >= 2 {
			break
		}
		select {
		case <-rec.Notify():
		case <-time.After(waitTimeout):
			t.Fatalf("no renewal after the failed heartbeats: %v", healthrec.Kinds(all))
		}
	}
	var failed int
	for i, e := range all {
		if e.Kind != health.RenewalFailed {
			continue
		}
		failed++
		var me *mysql.MySQLError
		if !errors.As(e.Err, &me) || e.Margin <= 0 || !e.Deadline.Before(e.Sent.Add(2*time.Second)) || i+1 == len(all) || all[i+1].Kind != health.AtRisk {
			t.Errorf("renewal failed = %+v, want the server's error, the deadline in force, then AtRisk", e)
		}
	}
	if failed != 2 {
		t.Errorf("%d RenewalFailed events, want 2: %v", failed, healthrec.Kinds(all))
	}
}

// TestNoObserverNoWarning: a session whose leases have no observer makes
// no warning timer through its heartbeats; the first lease on it with an
// observer arms one.
func TestNoObserverNoWarning(t *testing.T) {
	db := open(t, server.DSN("root", ""))
	a := lock(t, fast, db, subject(t))
	defer a.Unlock(context.Background())
	time.Sleep(3 * fast.Heartbeat)
	if a.WarningArmed() {
		t.Fatal("a session with no observed lease armed a warning")
	}
	rec := &healthrec.Recorder{}
	cfg := fast
	cfg.Observer = rec
	b := lock(t, cfg, db, subject(t))
	defer b.Unlock(context.Background())
	if !b.WarningArmed() || !a.WarningArmed() {
		t.Errorf("the session of an observed lease armed no warning")
	}
}

// grantHook is an observer that records, and runs f once as it is told a
// grant, before it returns.
type grantHook struct {
	rec  *healthrec.Recorder
	once sync.Once
	f    func()
}

func (h *grantHook) Observe(e health.Event) {
	h.rec.Observe(e)
	if e.Kind == health.Granted {
		h.once.Do(h.f)
	}
}

// TestObserverLostAsGranted: a lease whose session ends while its grant is
// being told is told its loss after the grant.
func TestObserverLostAsGranted(t *testing.T) {
	admin := rootDB(t, server)
	db := open(t, server.DSN("root", ""))
	a := lock(t, fast, db, subject(t))
	defer a.Unlock(context.Background())
	h := &grantHook{rec: &healthrec.Recorder{}}
	h.f = func() {
		if _, err := admin.ExecContext(context.Background(), fmt.Sprintf("KILL CONNECTION %d", sessionOf(t, admin, a))); err != nil {
			t.Error(err)
			return
		}
		waitLost(t, a)
	}
	cfg := fast
	cfg.Observer = h
	b := lock(t, cfg, db, subject(t))
	defer b.Unlock(context.Background())
	waitLost(t, b)
	all := h.rec.WaitFor(t, health.Lost, 1)
	if len(all) != 2 || all[0].Kind != health.Granted || all[1].Kind != health.Lost || all[1].Err != b.Signal().Err() {
		t.Errorf("events = %v, want the grant, then the loss with the signal's error", healthrec.Kinds(all))
	}
}

// lostHook is an observer that records, and runs f as it is told a loss.
type lostHook struct {
	rec *healthrec.Recorder
	f   func()
}

func (h *lostHook) Observe(e health.Event) {
	if e.Kind == health.Lost {
		h.f()
	}
	h.rec.Observe(e)
}

// TestObserverLostStatementsFree: a statement that fails its session loses
// its leases, and their observers are told with the session's statement
// lock given back.
func TestObserverLostStatementsFree(t *testing.T) {
	db := open(t, server.DSN("root", ""))
	var l *mysqllease.Lease
	free := make(chan bool, 1)
	h := &lostHook{rec: &healthrec.Recorder{}, f: func() { free <- l.StatementsFree() }}
	cfg := fast
	cfg.Observer = h
	l = lock(t, cfg, db, subject(t))
	defer l.Unlock(context.Background())
	if err := l.FailStatement(); err == nil {
		t.Fatal("FailStatement() = nil, want its error")
	}
	if err := l.Signal().Err(); !errors.Is(err, mysqllease.ErrConnLost) {
		t.Errorf("Err() = %v after the statement returned, want mysqllease.ErrConnLost", err)
	}
	h.rec.WaitFor(t, health.Lost, 1)
	if !<-free {
		t.Error("the observer was told the loss with the statement lock held")
	}
}
