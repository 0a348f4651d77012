package pglease_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

var (
	goalTrials = flag.Bool("pg.goals", false,
		"run the issue's goal trials (50 terminates, 20 shutdowns of each mode, 200 same-process takeovers, 30 of each other fault) instead of a few of each, and check the goals' times")
	readme = flag.String("pg.readme", "", "write the trials' table between the faults markers of this README")
)

// slow is the configuration of the latency trials: a deadline long enough
// that a round trip of half of it leaves the heartbeats room for a loaded
// machine's stalls.
var slow = pglease.Config{Heartbeat: 100 * time.Millisecond, Deadline: 2 * time.Second, ServerTimeout: 4 * time.Second}

// trials returns goal trials when -pg.goals is set, and few otherwise.
func trials(goal, few int) int {
	if *goalTrials {
		return goal
	}
	return few
}

// The faults, each with what its trials must show (faulttrial.Want).
var (
	fTerminate = faulttrial.Fault{Name: "pg_terminate_backend of A's backend, B in another process's place", Want: faulttrial.Raced}
	fSameProc  = faulttrial.Fault{Name: "pg_terminate_backend, B a lease of the same process", Want: faulttrial.NoOverlap}
	fFast      = faulttrial.Fault{Name: "fast shutdown (pg_ctl stop -m fast), restart, B locks", Want: faulttrial.NoOverlap}
	fImmediate = faulttrial.Fault{Name: "immediate shutdown (pg_ctl stop -m immediate), restart, B locks", Want: faulttrial.NoOverlap}
	fFailover  = faulttrial.Fault{Name: "failover: the primary stopped (fast), its streaming standby promoted, B locks there", Want: faulttrial.NoOverlap}
	fCut       = faulttrial.Fault{Name: "A's connection cut at the proxy", Want: faulttrial.Raced}
	fSilent    = faulttrial.Fault{Name: "network silent both ways at the proxy", Want: faulttrial.NoOverlap}
	fDeaf      = faulttrial.Fault{Name: "server's replies dropped at the proxy", Want: faulttrial.LossNeeded}
	fStopped   = faulttrial.Fault{Name: "A's backend stopped (SIGSTOP)", Want: faulttrial.LossNeeded}
	fLatency   = faulttrial.Fault{Name: "latency: 500 ms each way (a round trip of half the 2 s deadline) for 4 s", Want: faulttrial.NoLoss}
	fSlowed    = faulttrial.Fault{Name: "a shared session of 250 leases slowed: 500 ms each way for 4 s (A one of them)", Want: faulttrial.NoLoss}
	fBouncer   = faulttrial.Fault{Name: "PgBouncer's KILL of the database under a shared session of 250 leases (session mode; A one of them)", Want: faulttrial.Raced}
)

// sharedLeases is how many leases the shared-session rows hold on the one
// session of their pool.
const sharedLeases = 250

// The goals of the issue, checked with -pg.goals.
const (
	goalTerminate = 20 * time.Millisecond // pg_terminate_backend returns → A's Done
	goalShutdown  = 50 * time.Millisecond // shutdown begins → A's Done
)

// TestFaults runs each fault on holder A with B waiting for the lock, and
// records whether A was lost, when, and whether B was granted before A
// knew. B waits with a plain pg_advisory_lock, as a holder in another
// process does: its grant is the server's, not ordered by this process's
// leases (the same-process row alone has B take a lease).
//
// Two faults reach A and the server at once, and the server frees the lock
// without asking A: a termination (the server frees the lock right after it
// sends the FATAL that tells A) and a cut connection (the server and A each
// see the reset). B's backend and A's process then race, and nothing A can
// do makes it win. Those faults are kept as races (faulttrial.Raced): the
// overlaps are measured and reported, not bounded; A must still be lost,
// with the right cause, every time, and a B of the same process is ordered
// (checked, with no overlap).
func TestFaults(t *testing.T) {
	var book faulttrial.Book
	detections := make(map[string][]time.Duration)
	add := func(f faulttrial.Fault, tr faulttrial.Trial) {
		book.Add(f, tr)
		if tr.Lost {
			detections[f.Name] = append(detections[f.Name], tr.Detection)
		}
	}
	proxy, err := faultnet.Listen(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	admin := connect(t, server, server.Addr())

	// Faults at the server or the proxy: A is lost by push (terminate, cut)
	// or by the deadline (silent, replies dropped), and B is granted each
	// time; after a proxy fault, the proxy is healed and its connections cut,
	// so that the next trial starts from none.
	for _, pf := range []struct {
		fault    faulttrial.Fault
		name     string // of the subtest, and the prefix of each trial's subject
		trials   int    // with -pg.goals; few otherwise
		few      int
		viaProxy bool
		apply    func(t *testing.T, r *trial)
		cause    error
	}{
		{fTerminate, "terminate", 50, 5, false, func(t *testing.T, r *trial) { terminate(t, admin, r.aPID) }, pglease.ErrTerminated},
		{fCut, "cut", 30, 3, true, func(*testing.T, *trial) { proxy.Cut() }, pglease.ErrConnLost},
		{fSilent, "silent", 30, 3, true, func(*testing.T, *trial) { proxy.Drop(faultnet.Both) }, pglease.ErrUnresponsive},
		// The server still hears A's heartbeats and keeps the session: B
		// cannot be granted until A's close reaches it.
		{fDeaf, "deaf", 30, 3, true, func(*testing.T, *trial) { proxy.Drop(faultnet.ToClient) }, pglease.ErrUnresponsive},
	} {
		t.Run(pf.name, func(t *testing.T) {
			addr := server.Addr()
			if pf.viaProxy {
				addr = proxy.Addr()
			}
			for i := range trials(pf.trials, pf.few) {
				r := startTrial(t, server, addr, admin, fast, fmt.Sprintf("%s-%d", pf.name, i))
				r.fault(func() { pf.apply(t, r) })
				tr := r.finish(t, waitTimeout, waitTimeout, pf.cause)
				if !tr.Lost || !tr.Granted {
					t.Errorf("trial %d: A lost %v, B granted %v; want both", i, tr.Lost, tr.Granted)
				}
				add(pf.fault, tr)
				if pf.viaProxy {
					proxy.Heal()
					proxy.Cut()
				}
			}
		})
	}
	t.Run("same process", func(t *testing.T) {
		for i := range trials(200, 10) {
			add(fSameProc, sameProcessTrial(t, admin, fmt.Sprintf("same-%d", i)))
		}
	})
	t.Run("stopped", func(t *testing.T) {
		for i := range trials(30, 3) {
			r := startTrial(t, server, server.Addr(), admin, fast, fmt.Sprintf("stopped-%d", i))
			pid := int(r.aPID)
			r.fault(func() {
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Fatalf("SIGSTOP backend %d: %v", pid, err)
				}
			})
			// A stopped backend keeps its lock: B is not granted while it
			// is stopped, and is after it resumes and sees A's close.
			r.waitLoss(waitTimeout)
			_, grantedWhileStopped := r.b.granted(0)
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatalf("SIGCONT backend %d: %v", pid, err)
			}
			tr := r.finish(t, waitTimeout, waitTimeout, pglease.ErrUnresponsive)
			if grantedWhileStopped {
				t.Errorf("B granted while A's backend was stopped")
			}
			add(fStopped, tr)
		}
	})
	t.Run("latency", func(t *testing.T) {
		for i := range trials(30, 2) {
			r := startTrial(t, server, proxy.Addr(), admin, slow, fmt.Sprintf("latency-%d", i))
			r.fault(func() { proxy.Delay(slow.Deadline / 4) })
			add(fLatency, r.hold(t, 2*slow.Deadline, func() { proxy.Heal() }))
		}
	})
	// A shared session with many leases on it: slowed, every lease must be
	// kept; reset by the pooler in front of it (KILL, then RESUME), every
	// lease is lost.
	var sharedLost []string
	t.Run("shared slowed", func(t *testing.T) {
		sp, err := faultnet.Listen(server.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		lostN := 0
		n := trials(30, 1)
		for i := range n {
			r, leases := startSharedTrial(t, server, sp.Addr(), admin, slow, fmt.Sprintf("slowed-%d", i))
			r.fault(func() { sp.Delay(slow.Deadline / 4) })
			add(fSlowed, r.hold(t, 2*slow.Deadline, func() { sp.Heal() }))
			lostN += releaseAll(leases)
			sp.Cut()
		}
		if lostN > 0 {
			t.Errorf("%d of %d leases on slowed shared sessions lost, want 0", lostN, n*sharedLeases)
		}
		sharedLost = append(sharedLost, fmt.Sprintf("slowed: %d of %d leases lost in %d trials", lostN, n*sharedLeases, n))
	})
	t.Run("pooler reset", func(t *testing.T) {
		b := startBouncer(t, "session", 8)
		cfg := fast
		cfg.SessionPooler = true
		n := trials(30, 2)
		keptN := 0
		for i := range n {
			r, leases := startSharedTrial(t, server, b.Addr(), admin, cfg, fmt.Sprintf("reset-%d", i))
			r.fault(func() {
				if err := b.Admin(context.Background(), "KILL postgres"); err != nil {
					t.Fatal(err)
				}
			})
			// PgBouncer tells its client the database was removed (FATAL).
			add(fBouncer, r.finish(t, waitTimeout, waitTimeout, pglease.ErrTerminated))
			for _, l := range leases {
				if err := waitLostOr(l); !isLost(err, pglease.ErrTerminated) {
					keptN++
					t.Errorf("a lease on the reset session: Err() = %v, want ErrTerminated", err)
				}
			}
			releaseAll(leases)
			// A killed database waits for RESUME before it takes clients.
			if err := b.Admin(context.Background(), "RESUME postgres"); err != nil {
				t.Fatal(err)
			}
		}
		sharedLost = append(sharedLost, fmt.Sprintf("pooler reset: %d of %d leases not lost in %d trials", keptN, n*sharedLeases, n))
	})
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode+" shutdown", func(t *testing.T) {
			s, err := pgtest.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			f, want := fFast, []error{pglease.ErrTerminated}
			if mode == "immediate" {
				// The backend's warning is best effort: in some trials
				// the connection just ends.
				f, want = fImmediate, []error{pglease.ErrShutdown, pglease.ErrConnLost}
			}
			for i := range trials(20, 2) {
				add(f, shutdownTrial(t, s, mode, fmt.Sprintf("%s-%d", mode, i), want))
			}
		})
	}
	t.Run("failover", func(t *testing.T) {
		for i := range trials(30, 2) {
			add(fFailover, failoverTrial(t, fmt.Sprintf("failover-%d", i)))
		}
	})

	book.Check(t)
	goals := goalTable(t, detections)
	if *readme != "" {
		cmd := "make faults-pg"
		if !*goalTrials {
			cmd = "make e2e-pg"
		}
		table := book.Table(cmd) + "\n" + goals + "\nThe shared-session rows, every lease on the session: " + strings.Join(sharedLost, "; ") + ".\n"
		if err := faulttrial.WriteTable(*readme, table); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("\n%s\n%s", book.Table("go test -run TestFaults"), goals)
}

// goalTable checks the time goals when -pg.goals is set, and returns
// them as a Markdown table.
func goalTable(t *testing.T, detections map[string][]time.Duration) string {
	var b strings.Builder
	b.WriteString("| goal | trials | measured, max | met |\n|---|---:|---:|---|\n")
	row := func(what string, ds []time.Duration, goal time.Duration) {
		if len(ds) == 0 {
			return
		}
		m := slices.Max(ds)
		met := m <= goal
		if *goalTrials && !met {
			t.Errorf("%s: max %v over %d trials, goal %v", what, m, len(ds), goal)
		}
		fmt.Fprintf(&b, "| %s ≤ %v | %d | %.1f ms | %v |\n", what, goal, len(ds), float64(m)/float64(time.Millisecond), yesNo(met))
	}
	row("pg_terminate_backend returns → A's Done", detections[fTerminate.Name], goalTerminate)
	row("fast shutdown begins → A's Done", detections[fFast.Name], goalShutdown)
	row("immediate shutdown begins → A's Done", detections[fImmediate.Name], goalShutdown)
	row("network silent → A's Done (the deadline, "+fast.Deadline.String()+")", detections[fSilent.Name], fast.Deadline+fast.Heartbeat)
	row("backend stopped → A's Done (the deadline, "+fast.Deadline.String()+")", detections[fStopped.Name], fast.Deadline+fast.Heartbeat)
	return b.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// A trial is holder A with a lease on its own connection, and B waiting
// for the same lock with a plain pg_advisory_lock on another.
type trial struct {
	aPool *pgxpool.Pool
	aPID  uint32 // A's backend
	a     *pglease.Lease
	b     *waiter
	stamp *faulttrial.Stamp
	at    time.Time // when the fault was made
	seen  time.Time // when the test saw A's Done closed, if it did
}

// startSharedTrial takes sharedLeases leases through addr with cfg, on one
// shared session of a pool of their own, A the first of them, and starts
// B's wait for A's lock.
func startSharedTrial(t *testing.T, s *pgtest.Server, addr string, admin *pgx.Conn, cfg pglease.Config, prefix string) (*trial, []*pglease.Lease) {
	t.Helper()
	r := &trial{aPool: dialPool(t, s, addr)}
	leases := lockMany(t, cfg, r.aPool, prefix, sharedLeases)
	r.a = leases[0]
	r.aPID = holder(t, admin, r.a.Key())
	r.b = startWaiter(t, s, admin, r.a.Key())
	r.stamp = faulttrial.StampWhen(r.a.Signal().Done())
	return r, leases
}

// releaseAll unlocks leases and returns how many of them were lost.
func releaseAll(leases []*pglease.Lease) int {
	lost := 0
	for _, l := range leases {
		if l.Signal().Err() != nil {
			lost++
		}
		l.Unlock(context.Background())
	}
	return lost
}

// waitLostOr waits up to waitTimeout for l's loss and returns its Err.
func waitLostOr(l *pglease.Lease) error {
	seen(l.Signal().Done(), waitTimeout)
	return l.Signal().Err()
}

// startTrial takes A's lease through addr and starts B's wait.
func startTrial(t *testing.T, s *pgtest.Server, addr string, admin *pgx.Conn, cfg pglease.Config, subject string) *trial {
	t.Helper()
	r := &trial{aPool: dialPool(t, s, addr)}
	r.a = lock(t, cfg, r.aPool, subject)
	r.aPID = holder(t, admin, r.a.Key())
	r.b = startWaiter(t, s, admin, r.a.Key())
	r.stamp = faulttrial.StampWhen(r.a.Signal().Done())
	return r
}

// fault makes the fault and records when it returned.
func (r *trial) fault(f func()) {
	f()
	r.at = time.Now()
}

// waitLoss waits up to d for A's loss.
func (r *trial) waitLoss(d time.Duration) {
	if r.seen.IsZero() {
		r.seen = seen(r.a.Signal().Done(), d)
	}
}

// seen waits up to d for done and returns the time it saw it closed, or
// the zero time.
func seen(done <-chan struct{}, d time.Duration) time.Time {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return time.Now()
	case <-timer.C:
		return time.Time{}
	}
}

// closedAt returns the earlier of two times at which done was seen closed:
// each is later than the close, so the earlier is the closer bound. (On a
// loaded machine the stamp's goroutine can run long after the close.)
func closedAt(stamp *faulttrial.Stamp, seen time.Time) (time.Time, bool) {
	at, ok := stamp.Stop()
	if ok && !seen.IsZero() && seen.Before(at) {
		at = seen
	}
	return at, ok
}

// finish waits up to lostWithin for A's loss and up to grantWithin for B's
// grant, checks A's cause, releases everything and returns the trial.
func (r *trial) finish(t *testing.T, lostWithin, grantWithin time.Duration, cause error) faulttrial.Trial {
	t.Helper()
	r.waitLoss(lostWithin)
	grantAt, granted := r.b.granted(grantWithin)
	doneAt, lost := closedAt(r.stamp, r.seen)
	tr := faulttrial.Trial{Lost: lost, Granted: granted}
	if lost {
		err := r.a.Signal().Err()
		tr.Detection, tr.Cause = doneAt.Sub(r.at), err.Error()
		if !errors.Is(err, cause) {
			t.Errorf("A's Err() = %v, want %v", err, cause)
		}
		if granted {
			tr.Overlap = doneAt.Sub(grantAt)
		}
	}
	r.close(t)
	return tr
}

// hold keeps the fault for d, heals it with heal, and returns the trial: A
// must stay live and B must wait.
func (r *trial) hold(t *testing.T, d time.Duration, heal func()) faulttrial.Trial {
	t.Helper()
	r.waitLoss(d)
	_, granted := r.b.granted(0)
	heal()
	doneAt, lost := closedAt(r.stamp, r.seen)
	tr := faulttrial.Trial{Lost: lost, Granted: granted}
	if lost {
		tr.Detection, tr.Cause = doneAt.Sub(r.at), r.a.Signal().Err().Error()
	}
	r.close(t)
	return tr
}

func (r *trial) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	r.a.Unlock(ctx) // the loss's error, or nil after a benign fault
	r.aPool.Close()
	r.b.close(t)
}

// dial returns a connection through addr; the caller closes it.
func dial(t *testing.T, s *pgtest.Server, addr string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := s.Connect(ctx, addr)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return c
}

// dialPool returns a pool of connections through addr; the caller closes it.
func dialPool(t *testing.T, s *pgtest.Server, addr string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), s.ConnString(addr))
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	return p
}

// A waiter is holder B in another process's place: it waits for the lock
// with a plain pg_advisory_lock, and its grant is the moment that call
// returns.
type waiter struct {
	admin *pgx.Conn
	conn  *pgx.Conn
	done  chan struct{}
	at    time.Time
	err   error
}

// startWaiter starts B's wait and returns once the server has queued it.
func startWaiter(t *testing.T, s *pgtest.Server, admin *pgx.Conn, key int64) *waiter {
	t.Helper()
	w := &waiter{admin: admin, conn: dial(t, s, s.Addr()), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		_, w.err = w.conn.Exec(context.Background(), "select pg_advisory_lock($1::bigint)", key)
		w.at = time.Now()
	}()
	waitWaiting(t, admin, key)
	return w
}

// granted returns when B was granted, if it was within d.
func (w *waiter) granted(d time.Duration) (time.Time, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-w.done:
		return w.at, w.err == nil
	case <-timer.C:
		return time.Time{}, false
	}
}

// close ends B's wait if it still waits, and its session.
func (w *waiter) close(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
	default:
		if w.admin.PgConn().IsClosed() {
			t.Fatal("B still waits and the admin connection is closed")
		}
		w.admin.Exec(context.Background(), "select pg_terminate_backend($1)", int32(w.conn.PgConn().PID()))
		<-w.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	w.conn.Close(ctx)
}

// sameProcessTrial terminates A's backend while B, a lease of this process,
// waits: B's Lock must not return before A's signal is lost.
func sameProcessTrial(t *testing.T, admin *pgx.Conn, subject string) faulttrial.Trial {
	t.Helper()
	pool := dialPool(t, server, server.Addr())
	defer pool.Close()
	a := lock(t, fast, pool, subject)
	defer a.Unlock(context.Background()) // the loss's error; releases a lease a failed trial left live
	aPID := holder(t, admin, a.Key())
	stamp := faulttrial.StampWhen(a.Signal().Done())
	type result struct {
		b     *pglease.Lease
		err   error
		at    time.Time
		aLost bool // A's Err was set when B's Lock returned
	}
	ch := make(chan result, 1)
	bc := make(chan granted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		b, err := fast.Lock(ctx, pool, subject)
		at := time.Now()
		aLost := a.Signal().Err() != nil
		bc <- granted{b, err, at}
		ch <- result{b, err, at, aLost}
	}()
	waitWaitingOr(t, admin, a.Key(), bc)
	terminate(t, admin, aPID)
	at := time.Now()
	var res result
	select {
	case res = <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("B's Lock did not return after %v", waitTimeout)
	}
	if res.err != nil {
		t.Fatalf("B's Lock = %v", res.err)
	}
	defer unlock(t, res.b)
	if !res.aLost {
		t.Errorf("B's Lock returned while A was live")
	}
	doneAt, lost := closedAt(stamp, seen(a.Signal().Done(), waitTimeout))
	tr := faulttrial.Trial{Lost: lost, Granted: true}
	if lost {
		tr.Detection, tr.Cause = doneAt.Sub(at), a.Signal().Err().Error()
		// The stamp's goroutine may wake after B's; Err, set before B's
		// Lock returned, is what orders them.
		tr.Overlap = doneAt.Sub(res.at)
		if res.aLost {
			tr.Overlap = min(tr.Overlap, 0)
		}
	}
	return tr
}

// failoverTrial starts a primary and a streaming standby of its own, has A
// lock on the primary, then fails over in the safe order: the primary is
// stopped (fast), the standby promoted, and B locks there, which it can at
// once, since a standby holds none of the primary's advisory locks.
func failoverTrial(t *testing.T, subject string) faulttrial.Trial {
	t.Helper()
	primary, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	standby, err := primary.StartStandby()
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	stop := func() error { return primary.Stop("fast") }
	return stopTrial(t, primary, stop, standby, standby.Promote, subject, []error{pglease.ErrTerminated})
}

// shutdownTrial stops s with pg_ctl stop -m mode while A holds a lease, then
// starts it again and has B take the lock.
func shutdownTrial(t *testing.T, s *pgtest.Server, mode, subject string, causes []error) faulttrial.Trial {
	t.Helper()
	stop := func() error { return s.Stop(mode) }
	return stopTrial(t, s, stop, s, s.Restart, subject, causes)
}

// stopTrial has A lock on from, then runs stop, the fault, from the moment
// it starts, and up, which readies to, where B then takes the lock with a
// plain pg_advisory_lock. A's cause must be one of causes.
func stopTrial(t *testing.T, from *pgtest.Server, stop func() error, to *pgtest.Server, up func() error, subject string, causes []error) faulttrial.Trial {
	t.Helper()
	aPool := dialPool(t, from, from.Addr())
	defer aPool.Close()
	a := lock(t, fast, aPool, subject)
	stamp := faulttrial.StampWhen(a.Signal().Done())
	at := time.Now() // the fault begins: pg_ctl starts
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	seenAt := seen(a.Signal().Done(), waitTimeout)
	if err := up(); err != nil {
		t.Fatal(err)
	}
	bConn := dial(t, to, to.Addr())
	defer bConn.Close(context.Background())
	_, err := bConn.Exec(context.Background(), "select pg_advisory_lock($1::bigint)", a.Key())
	grantAt := time.Now()
	doneAt, lost := closedAt(stamp, seenAt)
	tr := faulttrial.Trial{Lost: lost, Granted: err == nil}
	if lost {
		aErr := a.Signal().Err()
		tr.Detection, tr.Cause, tr.Overlap = doneAt.Sub(at), aErr.Error(), doneAt.Sub(grantAt)
		if !slices.ContainsFunc(causes, func(c error) bool { return errors.Is(aErr, c) }) {
			t.Errorf("A's Err() = %v, want one of %v", aErr, causes)
		}
	}
	a.Unlock(context.Background())
	return tr
}
