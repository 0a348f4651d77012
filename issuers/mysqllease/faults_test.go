package mysqllease_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"flag"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/mysqllease"
	"github.com/zukhruf/lease/issuers/mysqllease/internal/mysqltest"
)

var (
	faultTrials = flag.Int("faults.trials", 2, "trials of each fault in TestFaults")
	faultGoals  = flag.Bool("faults.goals", false, "check the issue's goals on the times of TestFaults (KILL → Done, Unlock → grant)")
	faultReadme = flag.String("faults.readme", "", "write TestFaults' table between the faults markers of this README")
)

// The faults, each with what its trials must show.
var (
	fKill       = faulttrial.Fault{Name: "KILL CONNECTION of A's session, B a GET_LOCK of another session", Want: faulttrial.Raced}
	fKillOrder  = faulttrial.Fault{Name: "KILL CONNECTION of A's session, B a lease of the same process", Want: faulttrial.NoOverlap}
	fKillMany   = faulttrial.Fault{Name: "KILL CONNECTION of A's shared session, 100 leases beside A on it, B a lease of the same process", Want: faulttrial.NoOverlap}
	fKillApart  = faulttrial.Fault{Name: "KILL CONNECTION of A's shared session, 100 leases beside A on it, B a lease of another process", Want: faulttrial.NoOverlap}
	fSlowMany   = faulttrial.Fault{Name: "A's link slowed, 300 ms each way (a round trip over (deadline − Heartbeat)/2, 450 ms), 100 leases beside A on its shared session", Want: faulttrial.NoOverlap}
	fSlowBenign = faulttrial.Fault{Name: "benign: A's link slowed, 150 ms each way for 3 s, 100 leases beside A on its shared session", Want: faulttrial.NoLoss}
	fSilentMany = faulttrial.Fault{Name: "A's link silent both ways, 100 leases beside A on its shared session", Want: faulttrial.NoOverlap}
	fSilent     = faulttrial.Fault{Name: "A's link silent both ways", Want: faulttrial.NoOverlap}
	fRequests   = faulttrial.Fault{Name: "A's requests dropped", Want: faulttrial.NoOverlap}
	fAnswers    = faulttrial.Fault{Name: "the server's answers to A dropped", Want: faulttrial.NoOverlap}
	fLatency    = faulttrial.Fault{Name: "latency 2.5 s each way, above the 2 s server timeout", Want: faulttrial.NoOverlap}
	fShutdown   = faulttrial.Fault{Name: "server shut down (SIGTERM), restarted, B locks", Want: faulttrial.NoOverlap}
	fCrash      = faulttrial.Fault{Name: "server killed (SIGKILL), restarted, B locks", Want: faulttrial.NoOverlap}
	fFailover   = faulttrial.Fault{Name: "primary killed, its replica promoted, B locks there", Want: faulttrial.NoOverlap}
	fBenignLat  = faulttrial.Fault{Name: "benign: latency 100 ms each way for 3 s", Want: faulttrial.NoLoss}
	fPause      = faulttrial.Fault{Name: "benign: server paused (SIGSTOP) 400 ms", Want: faulttrial.NoLoss}
	fPoolReset  = faulttrial.Fault{Name: "benign: the pool's other sessions killed", Want: faulttrial.NoLoss}
)

// The goals of the issue, checked with -faults.goals.
const (
	goalKill        = 100 * time.Millisecond // KILL CONNECTION returns → A's Done, every trial
	goalHandOver    = 50 * time.Millisecond  // Unlock → a waiting Lock granted, median
	goalHandOverMax = 500 * time.Millisecond // Unlock → a waiting Lock granted, max
)

// A pinger is the peer A′: a GET_LOCK holder that pings its connection
// once a second and cancels its context when a ping fails, as the Go
// library go-mysql-lock does (the module proxy does not serve it, so this is
// its refresher, written after it). Its session has the lease's
// wait_timeout, so that the server frees a silent A′'s lock as soon as A's.
type pinger struct {
	conn   *sql.Conn
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}
}

func startPinger(t testing.TB, db *sql.DB, name string) *pinger {
	t.Helper()
	conn, _ := rawLock(t, db, name, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	p := &pinger{conn: conn, ctx: ctx, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if err := conn.PingContext(context.Background()); err != nil {
					cancel()
					return
				}
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

// close stops the pinger; its connection is closed by the test's cleanup,
// which ends a ping stuck on a silent link.
func (p *pinger) close() {
	close(p.stop)
	p.conn.Raw(func(any) error { return errBad })
	<-p.done
	p.cancel()
}

// waiter is B (or B′): a plain GET_LOCK in a session of its own, retried
// on a new connection when its connection fails (a restart), until window
// ends. granted is closed at the grant.
type waiter struct {
	at      time.Time
	aFirst  bool // a lease B's Lock returned with A's Done already closed
	granted chan struct{}
	done    chan struct{}
	conn    *sql.Conn
	lease   *mysqllease.Lease
	quit    context.CancelFunc
}

func startWaiter(db *sql.DB, name string, window time.Duration) *waiter {
	ctx, cancel := context.WithTimeout(context.Background(), window)
	w := &waiter{granted: make(chan struct{}), done: make(chan struct{}), quit: cancel}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			conn, err := db.Conn(ctx)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			var got sql.NullInt64
			for ctx.Err() == nil {
				if err = conn.QueryRowContext(ctx, getLockSQL(name, time.Second)).Scan(&got); err != nil || got.Int64 == 1 {
					break
				}
			}
			if err == nil && got.Int64 == 1 {
				w.at = time.Now()
				w.conn = conn
				close(w.granted)
				return
			}
			conn.Raw(func(any) error { return errBad })
			conn.Close()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// release ends the wait and releases the lock if it was granted.
func (w *waiter) release() {
	w.quit()
	<-w.done
	if w.conn != nil {
		w.conn.Raw(func(any) error { return errBad })
		w.conn.Close()
	}
	if w.lease != nil {
		w.lease.Unlock(context.Background())
	}
}

// startLeaseWaiter is B as a lease of this process, or of another process
// when apart: its grant is the return of its Lock. aDone is A's Done, which
// it reads as its Lock returns.
func startLeaseWaiter(db *sql.DB, subj string, window time.Duration, apart bool, aDone <-chan struct{}) *waiter {
	ctx, cancel := context.WithTimeout(context.Background(), window)
	w := &waiter{granted: make(chan struct{}), done: make(chan struct{}), quit: cancel}
	var restore func()
	if apart {
		restore = mysqllease.AsAnotherProcess(db)
	}
	go func() {
		defer close(w.done)
		if restore != nil {
			defer restore()
		}
		l, err := fast.Lock(ctx, db, subj)
		if err == nil {
			w.at = time.Now()
			w.aFirst = isClosed(aDone)
			w.lease = l
			close(w.granted)
		}
	}()
	return w
}

// errBad, returned from Raw, makes database/sql close the connection.
var errBad = driver.ErrBadConn

// A faultRig is the servers and proxies of TestFaults: its own primary,
// which the server faults stop, and a proxy in front of it for A and A′.
type faultRig struct {
	primary *mysqltest.Server
	proxy   *faultnet.Proxy
}

// trial runs one trial of f: A (a lease) and A′ (a pinger) each hold a
// lock, through the proxy when viaProxy; B and B′ wait for them directly on
// bServer (nil: the rig's primary), from before the fault, reconnecting
// when their connections fail; apply injects the fault and returns its
// time. The trial lasts until B and B′ are granted or window passes.
func (r *faultRig) trial(t *testing.T, f faulttrial.Fault, i int, viaProxy bool, b kindOfB, siblings int, window time.Duration, bServer *mysqltest.Server,
	apply func(a *mysqllease.Lease, p *pinger) (faultAt time.Time)) faulttrial.Trial {
	t.Helper()
	addr := r.primary.Addr()
	if viaProxy {
		addr = r.proxy.Addr()
	}
	aDB := open(t, r.primary.DSNAt(addr, "root", ""))
	pDB := open(t, r.primary.DSNAt(addr, "root", "")+"?wait_timeout="+fmt.Sprint(int(fast.ServerTimeout/time.Second)))
	subj := fmt.Sprintf("%s-%d", subject(t), i)
	// The siblings are leases of A's pool, taken before A: fewer than a
	// session holds before a Lock opens another, they share A's session.
	var sibs []*mysqllease.Lease
	var sibStamps []*faulttrial.Stamp
	for j := range siblings {
		l := lock(t, fast, aDB, fmt.Sprintf("%s-sib-%d", subj, j))
		sibs = append(sibs, l)
		sibStamps = append(sibStamps, faulttrial.StampWhen(l.Signal().Done()))
	}
	a := lock(t, fast, aDB, subj)
	if siblings > 0 && sessionOf(t, rootDB(t, r.primary), sibs[0]) != sessionOf(t, rootDB(t, r.primary), a) {
		t.Fatal("A and its siblings are on two sessions, want one")
	}
	p := startPinger(t, pDB, subj+"-peer")
	aStamp := faulttrial.StampWhen(a.Signal().Done())
	pStamp := faulttrial.StampWhen(p.ctx.Done())

	// B waits from before the fault on the primary; on another server (a
	// replica to be promoted, which grants locks of its own) it starts
	// after the fault.
	var bw, b2 *waiter
	startB := func() {
		bDB := rootDB(t, bServer)
		if b == plainB {
			bw = startWaiter(bDB, subj, window)
		} else {
			bw = startLeaseWaiter(bDB, subj, window, b == apartB, a.Signal().Done())
		}
		b2 = startWaiter(bDB, subj+"-peer", window)
	}
	var faultAt time.Time
	if bServer == nil {
		bServer = r.primary
		startB()
		admin := rootDB(t, bServer)
		waitWaiting(t, admin, subj, nil)
		waitWaiting(t, admin, subj+"-peer", nil)
		faultAt = apply(a, p)
	} else {
		faultAt = apply(a, p)
		startB()
	}
	<-bw.done
	<-b2.done
	if f.Want != faulttrial.NoLoss {
		// A loss after B's grant is late: give A and A′ a moment more to
		// be told (A′ pings once a second), so that the row shows how late
		// rather than "never".
		bound := time.After(fast.ServerTimeout)
		for _, done := range []<-chan struct{}{a.Signal().Done(), p.ctx.Done()} {
			select {
			case <-done:
			case <-bound:
			}
		}
	}
	aAt, aLost := aStamp.Stop()
	pAt, pLost := pStamp.Stop()
	tr := faulttrial.Trial{Lost: aLost, Granted: isClosed(bw.granted), Peer: &faulttrial.Peer{Lost: pLost, Granted: isClosed(b2.granted)}}
	if aLost {
		tr.Detection = aAt.Sub(faultAt)
		tr.Cause = a.Signal().Err().Error()
		if tr.Granted {
			tr.Overlap = aAt.Sub(bw.at)
			if bw.aFirst && tr.Overlap > 0 {
				// A's stamp is taken by a goroutine that may run after
				// B's; B's Lock returned with A's Done closed, so the
				// loss came first.
				tr.Overlap = 0
			}
		}
	}
	if pLost {
		tr.Peer.Detection = pAt.Sub(faultAt)
		if tr.Peer.Granted {
			tr.Peer.Overlap = pAt.Sub(b2.at)
		}
	}
	for j, st := range sibStamps {
		at, lost := st.Stop()
		if f.Want == faulttrial.NoLoss {
			if lost {
				t.Errorf("trial %d: sibling %d of A was lost in a benign fault", i, j)
			}
			continue
		}
		if aLost && !lost {
			t.Errorf("trial %d: A was lost, its sibling %d on the same session was not", i, j)
		}
		if lost {
			siblingsLost[f.Name] = append(siblingsLost[f.Name], at.Sub(faultAt))
		}
	}
	for _, l := range sibs {
		l.Unlock(context.Background())
	}
	bw.release()
	b2.release()
	p.close()
	a.Unlock(context.Background())
	r.proxy.Heal()
	r.proxy.Cut()
	return tr
}

// kindOfB is what B is in a trial.
type kindOfB int

const (
	plainB kindOfB = iota // a GET_LOCK of another session
	leaseB                // a lease of the same process as A
	apartB                // a lease of another process (a pool the registry keeps apart)
)

// manySiblings is how many leases share A's session in the rows of many
// leases.
const manySiblings = 100

// siblingsLost is, by fault, the time from the fault to each loss of A's
// siblings.
var siblingsLost = map[string][]time.Duration{}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestFaults runs each fault on holder A, a lease, and on A′, a pinging
// GET_LOCK holder, each with a holder B (B′) waiting for its lock in
// another session, and records whether A was lost, when, and whether B was
// granted before A knew.
func TestFaults(t *testing.T) {
	primary, err := mysqltest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	proxy, err := faultnet.Listen(primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	r := &faultRig{primary: primary, proxy: proxy}
	book := faulttrial.Book{Peer: "a GET_LOCK holder that pings its connection once a second, as go-mysql-lock does, with the same wait_timeout"}
	admin := rootDB(t, primary)
	var kills, killDetections []time.Duration
	window := 4 * fast.ServerTimeout
	sessions := func(a *mysqllease.Lease, p *pinger) (int64, int64) {
		var pid int64
		p.conn.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&pid)
		return sessionOf(t, admin, a), pid
	}
	restart := func(stop func() error) func(*mysqllease.Lease, *pinger) time.Time {
		return func(*mysqllease.Lease, *pinger) time.Time {
			at := time.Now()
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if err := primary.Restart(); err != nil {
				t.Fatal(err)
			}
			return at
		}
	}
	proxyFault := func(apply func()) func(*mysqllease.Lease, *pinger) time.Time {
		return func(*mysqllease.Lease, *pinger) time.Time {
			at := time.Now()
			apply()
			return at
		}
	}
	kill := func(a *mysqllease.Lease, p *pinger) time.Time {
		aID, pID := sessions(a, p)
		at := time.Now()
		mustExec(t, admin, fmt.Sprintf("KILL CONNECTION %d", aID))
		kills = append(kills, time.Since(at))
		mustExec(t, admin, fmt.Sprintf("KILL CONNECTION %d", pID))
		return at
	}
	rows := []struct {
		f        faulttrial.Fault
		viaProxy bool
		b        kindOfB
		siblings int // leases beside A on its session
		cause    error
		apply    func(*mysqllease.Lease, *pinger) time.Time
	}{
		{fKill, false, plainB, 0, mysqllease.ErrConnLost, kill},
		{fKillOrder, false, leaseB, 0, mysqllease.ErrConnLost, kill},
		{fKillMany, false, leaseB, manySiblings, mysqllease.ErrConnLost, kill},
		{fKillApart, false, apartB, manySiblings, mysqllease.ErrConnLost, kill},
		{fSlowMany, true, plainB, manySiblings, mysqllease.ErrUnresponsive, proxyFault(func() { proxy.Delay(300 * time.Millisecond) })},
		{fSlowBenign, true, plainB, manySiblings, nil, proxyFault(func() {
			proxy.Delay(150 * time.Millisecond)
			time.AfterFunc(3*time.Second, func() { proxy.Delay(0) })
		})},
		{fSilent, true, plainB, 0, mysqllease.ErrUnresponsive, proxyFault(func() { proxy.Drop(faultnet.Both) })},
		{fSilentMany, true, plainB, manySiblings, mysqllease.ErrUnresponsive, proxyFault(func() { proxy.Drop(faultnet.Both) })},
		{fRequests, true, plainB, 0, mysqllease.ErrUnresponsive, proxyFault(func() { proxy.Drop(faultnet.ToServer) })},
		{fAnswers, true, plainB, 0, mysqllease.ErrUnresponsive, proxyFault(func() { proxy.Drop(faultnet.ToClient) })},
		{fLatency, true, plainB, 0, mysqllease.ErrUnresponsive, proxyFault(func() { proxy.Delay(fast.ServerTimeout + fast.ServerTimeout/4) })},
		{fShutdown, false, plainB, 0, mysqllease.ErrConnLost, restart(primary.Stop)},
		{fCrash, false, plainB, 0, mysqllease.ErrConnLost, restart(primary.Kill)},
		{fBenignLat, true, plainB, 0, nil, proxyFault(func() {
			proxy.Delay(100 * time.Millisecond)
			time.AfterFunc(3*time.Second, func() { proxy.Delay(0) })
		})},
		{fPause, false, plainB, 0, nil, func(*mysqllease.Lease, *pinger) time.Time {
			at := time.Now()
			primary.Signal(syscall.SIGSTOP)
			time.Sleep(400 * time.Millisecond)
			primary.Signal(syscall.SIGCONT)
			return at
		}},
		{fPoolReset, true, plainB, 0, nil, func(a *mysqllease.Lease, p *pinger) time.Time {
			aID, pID := sessions(a, p)
			at := time.Now()
			rows, err := admin.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Sleep' AND ID NOT IN (?, ?, CONNECTION_ID())", aID, pID)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for rows.Next() {
				var id int64
				rows.Scan(&id)
				ids = append(ids, id)
			}
			rows.Close()
			for _, id := range ids {
				admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
			}
			return at
		}},
	}
	for _, row := range rows {
		t.Run(row.f.Name, func(t *testing.T) {
			w := window
			if row.f.Want == faulttrial.NoLoss {
				w = 2 * fast.ServerTimeout // B must not be granted in it
			}
			trials := *faultTrials
			if row.f == fSlowMany || row.f == fSlowBenign {
				// The slowed link never loses A′, whose B′ waits out the
				// window: B is granted within 2 s of the fault. The smoke
				// run (make e2e, fewer than 30 trials) runs one of each.
				w = 2 * fast.ServerTimeout
				if trials < 30 {
					trials = 1
				}
			}
			for i := range trials {
				tr := r.trial(t, row.f, i, row.viaProxy, row.b, row.siblings, w, nil, row.apply)
				if tr.Lost && row.cause != nil && !strings.Contains(tr.Cause, row.cause.Error()) {
					t.Errorf("trial %d: A lost with %s, want %v", i, tr.Cause, row.cause)
				}
				book.Add(row.f, tr)
				if row.f.Want == faulttrial.Raced || row.f == fKillOrder {
					killDetections = append(killDetections, tr.Detection)
				}
			}
		})
	}
	t.Run(fFailover.Name, func(t *testing.T) {
		for i := range *faultTrials {
			book.Add(fFailover, failoverTrial(t, i))
		}
	})
	hand := handOvers(t, primary, *faultTrials*5, false)
	handPolled := handOvers(t, primary, *faultTrials*5, true)
	book.Check(t)
	table := book.Table("make faults-mysql") + fmt.Sprintf("\nKILL CONNECTION sent → A's Done, %d trials: median %v, max %v (the KILL statement itself took %v median).\n\nUnlock → a waiting Lock granted, %d hand-overs: median %v, max %v (on a session of its own); %d hand-overs: median %v, max %v (polling beyond Config.Waiters).\n",
		len(killDetections), medianOf(killDetections).Round(10*time.Microsecond), slices.Max(killDetections).Round(10*time.Microsecond), medianOf(kills).Round(10*time.Microsecond),
		len(hand), medianOf(hand).Round(10*time.Microsecond), slices.Max(hand).Round(10*time.Microsecond),
		len(handPolled), medianOf(handPolled).Round(10*time.Microsecond), slices.Max(handPolled).Round(10*time.Microsecond))
	for _, f := range []faulttrial.Fault{fKillMany, fKillApart, fSilentMany, fSlowMany} {
		if ds := siblingsLost[f.Name]; len(ds) > 0 {
			table += fmt.Sprintf("\n%s: the fault → each of the %d leases beside A lost, %d losses: median %v, max %v.\n",
				f.Name, manySiblings, len(ds), medianOf(ds).Round(10*time.Microsecond), slices.Max(ds).Round(10*time.Microsecond))
		}
	}
	t.Log("\n" + table)
	if *faultGoals {
		if m := slices.Max(killDetections); m > goalKill {
			t.Errorf("KILL CONNECTION → A's Done took up to %v, over the goal %v", m, goalKill)
		}
		for _, h := range [][]time.Duration{hand, handPolled} {
			if m := medianOf(h); m > goalHandOver {
				t.Errorf("Unlock → grant median %v, over the goal %v", m, goalHandOver)
			}
			if m := slices.Max(h); m > goalHandOverMax {
				t.Errorf("Unlock → grant max %v, over the goal %v", m, goalHandOverMax)
			}
		}
	}
	if *faultReadme != "" && !t.Failed() {
		if err := faulttrial.WriteTable(*faultReadme, table); err != nil {
			t.Fatal(err)
		}
	}
}

func medianOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// failoverTrial: A and A′ on a primary with a replica; the primary is
// killed, the replica promoted, and B (B′) lock on it.
func failoverTrial(t *testing.T, i int) faulttrial.Trial {
	primary, err := mysqltest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	replica, err := primary.StartReplica()
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	proxy, err := faultnet.Listen(primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	r := &faultRig{primary: primary, proxy: proxy}
	return r.trial(t, fFailover, i, false, plainB, 0, 4*fast.ServerTimeout, replica, func(*mysqllease.Lease, *pinger) time.Time {
		at := time.Now()
		if err := primary.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := replica.Promote(); err != nil {
			t.Fatal(err)
		}
		return at
	})
}

// handOvers measures n times the time from an Unlock to the grant of a
// Lock waiting for the lock, in another pool: on a session of its own, or,
// when beyond, polling beyond Config.Waiters (1 here, and taken by a Lock
// that waits for a lock never released).
func handOvers(t *testing.T, s *mysqltest.Server, n int, beyond bool) []time.Duration {
	admin := rootDB(t, s)
	aDB, bDB := rootDB(t, s), rootDB(t, s)
	cfg := fast
	if beyond {
		cfg.Waiters = 1
		held := subject(t)
		c, _ := rawLock(t, rootDB(t, s), held, time.Second)
		ch := lockAsync(t, admin, cfg, bDB, held)
		defer func() {
			dropConn(c)
			if g := <-ch; g.lease != nil {
				g.lease.Unlock(context.Background())
			}
		}()
	}
	var out []time.Duration
	for range n {
		subj := subject(t)
		a := lock(t, cfg, aDB, subj)
		ch := waitFor(t, admin, cfg, bDB, subj, beyond)
		if beyond {
			// Polls back off to one each 50 ms while nothing is granted:
			// let them reach it, as a Lock that waits for long does.
			time.Sleep(250 * time.Millisecond)
		}
		start := time.Now()
		if err := a.Unlock(context.Background()); err != nil {
			t.Fatalf("Unlock = %v", err)
		}
		g := <-ch
		if g.err != nil {
			t.Fatalf("the waiting Lock = %v", g.err)
		}
		out = append(out, g.at.Sub(start))
		g.lease.Unlock(context.Background())
	}
	return out
}

// TestHandOvers measures the hand-over of a lock from an Unlock to a
// Lock of another pool that waits on a session of its own, and to one that
// polls beyond Config.Waiters, 5 × -faults.trials times each; with
// -faults.goals, it checks the goals (50 ms median, 500 ms max).
func TestHandOvers(t *testing.T) {
	for _, beyond := range []bool{false, true} {
		d := handOvers(t, server, *faultTrials*5, beyond)
		t.Logf("Unlock → a waiting Lock granted (%s), %d hand-overs: median %v, max %v", waitKind(beyond), len(d), medianOf(d).Round(10*time.Microsecond), slices.Max(d).Round(10*time.Microsecond))
		if *faultGoals {
			if m := medianOf(d); m > goalHandOver {
				t.Errorf("Unlock → grant (%s) median %v, over the goal %v", waitKind(beyond), m, goalHandOver)
			}
			if m := slices.Max(d); m > goalHandOverMax {
				t.Errorf("Unlock → grant (%s) max %v, over the goal %v", waitKind(beyond), m, goalHandOverMax)
			}
		}
	}
}

func waitKind(beyond bool) string {
	if beyond {
		return "polling beyond Config.Waiters"
	}
	return "on a session of its own"
}
