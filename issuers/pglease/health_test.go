package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/lost"
)

// TestObserverEvents: on a shared session and on a session of its own, a
// lease's observer is told of its grant, its confirmed heartbeats in order,
// and its release; another's, of its grant and its loss when its backend
// is terminated.
func TestObserverEvents(t *testing.T) {
	for _, own := range []bool{false, true} {
		name := map[bool]string{false: "shared", true: "own"}[own]
		t.Run(name, func(t *testing.T) {
			admin := connect(t, server, server.Addr())
			pool := newPool(t, server, server.Addr())
			rec := &healthrec.Recorder{}
			cfg := fast
			cfg.OwnSession, cfg.Observer = own, rec
			l := lock(t, cfg, pool, "observed "+name)
			rec.WaitFor(t, health.Renewed, 2)
			h := l.Health()
			unlock(t, l)
			all := rec.Events()
			renewals, err := healthrec.Renewals(all)
			if err != nil {
				t.Fatal(err)
			}
			var last time.Time
			for _, e := range renewals {
				if e.Sent.Before(last) || e.Deadline.Sub(e.Sent) != fast.Deadline {
					t.Errorf("renewed: sent %v after %v, deadline %v after it; want later sends, the Deadline", e.Sent, last, e.Deadline.Sub(e.Sent))
				}
				last = e.Sent
			}
			if g := all[0]; g.Subject != "observed "+name || g.Token != l.Token() || g.Issuer != "pglease" || g.Wait <= 0 {
				t.Errorf("granted = %+v, want the subject, token %d, a wait", g, l.Token())
			}
			if h.Deadline.Sub(h.Renewed) != fast.Deadline || h.Margin <= 0 {
				t.Errorf("Health() = %+v, want the deadline Deadline after the heartbeat, a margin > 0", h)
			}

			rec2 := &healthrec.Recorder{}
			cfg.Observer = rec2
			l2 := lock(t, cfg, pool, "observed lost "+name)
			terminate(t, admin, holder(t, admin, l2.Key()))
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
		})
	}
}

// TestSessionWatchArmedOnlyObserved: a shared session arms its watch only
// while a lease on it has an observer: not for an unobserved lease's
// heartbeats, at each confirmation once an observed lease joins it, and no
// more once that lease is released.
func TestSessionWatchArmedOnlyObserved(t *testing.T) {
	pool := newPool(t, server, server.Addr())
	a := lock(t, fast, pool, "unobserved")
	defer unlock(t, a)
	time.Sleep(5 * fast.Heartbeat)
	if n, _ := pglease.RiskArms(a); n != 0 {
		t.Fatalf("the watch was armed %d times with no observed lease on the session, want 0", n)
	}
	rec := &healthrec.Recorder{}
	cfg := fast
	cfg.Observer = rec
	b := lock(t, cfg, pool, "observed")
	_, sa := pglease.RiskArms(a)
	if _, sb := pglease.RiskArms(b); sa != sb {
		t.Fatal("the two leases are not on one shared session")
	}
	rec.WaitFor(t, health.Renewed, 3)
	if n, _ := pglease.RiskArms(a); n < 3 {
		t.Errorf("the watch was armed %d times over 3 confirmations of an observed lease, want at least 3", n)
	}
	unlock(t, b)
	time.Sleep(2 * fast.Heartbeat) // a confirmation read before the release may arm it once more
	before, _ := pglease.RiskArms(a)
	time.Sleep(5 * fast.Heartbeat)
	if n, _ := pglease.RiskArms(a); n != before {
		t.Errorf("the watch was armed %d times after the observed lease's release, want 0", n-before)
	}
}

// TestUnlockCancelledContextHandsOver: an Unlock whose context was
// cancelled still sends its release, and says it did: nil, and a waiting
// Lock of another pool is granted at once, on a shared session and on a
// session of its own.
func TestUnlockCancelledContextHandsOver(t *testing.T) {
	admin := connect(t, server, server.Addr())
	pa, pb := newPool(t, server, server.Addr()), newPool(t, server, server.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, own := range []bool{false, true} {
		cfg := sturdy
		cfg.OwnSession = own
		subject := map[bool]string{false: "cancelled shared", true: "cancelled own"}[own]
		a := lock(t, cfg, pa, subject)
		ch := lockAsync(t, admin, cfg, pb, subject)
		time.Sleep(3 * cfg.Heartbeat)
		start := time.Now()
		if err := a.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock(cancelled context) = %v, want nil: the release went through", subject, err)
		}
		g := waitGranted(t, ch)
		if g.err != nil {
			t.Fatalf("%s: the waiting Lock = %v", subject, g.err)
		}
		t.Logf("%s: Unlock(cancelled context) → waiting Lock granted in %v", subject, g.at.Sub(start))
		if took := g.at.Sub(start); took >= cfg.ServerTimeout/2 {
			t.Errorf("%s: the waiting Lock was granted %v after the Unlock, not by its release", subject, took)
		}
		unlock(t, g.lease)
	}
}

// slowedDeadline is the deadline span of the leases of TestAtRiskBeforeLoss;
// their Heartbeat is a quarter of it, so that a round trip of 80% of the
// span answers each heartbeat after the deadline that the one before set.
// The warning comes a third of it, 1 s, before the loss: with a 1 s span,
// the 333 ms between them were once not enough for the process to run on
// a machine shared with other builds (6 trials of 30 lost unwarned, all of
// one wave; a warning told 453 ms after it was due, the loss as late).
const slowedDeadline = 3 * time.Second

// slowedRun is one trial of TestAtRiskBeforeLoss: a lease of subject held
// through a proxy of its own, on a shared session of a pool of its own or
// on a session of its own, lets its session confirm renewals heartbeats,
// then every byte of the link is delayed by share of the deadline span
// divided by two each way, and the trial waits for the loss and its event.
// On a shared session two neighbours share the lease's session, one
// observed and one not: the session's warning goes to both observed leases.
// It returns the observed leases' recorders and, for each, how many events
// came before the link was slowed.
func slowedRun(ctx context.Context, own bool, subject string, renewals int, share float64) (recs []*healthrec.Recorder, slowedAt []int, err error) {
	proxy, err := faultnet.Listen(server.Addr())
	if err != nil {
		return nil, nil, err
	}
	defer proxy.Close()
	pool, err := pgxpool.New(ctx, server.ConnString(proxy.Addr()))
	if err != nil {
		return nil, nil, err
	}
	defer pool.Close()
	cfg := pglease.Config{Heartbeat: slowedDeadline / 4, Deadline: slowedDeadline, OwnSession: own}
	var ls []*pglease.Lease
	defer func() {
		for _, l := range ls {
			l.Unlock(context.Background())
		}
	}()
	observers := []*healthrec.Recorder{{}, nil}
	if !own {
		observers = append(observers, &healthrec.Recorder{})
	}
	for i, rec := range observers {
		cfg.Observer = nil
		if rec != nil {
			cfg.Observer = rec
			recs = append(recs, rec)
		}
		l, err := cfg.Lock(ctx, pool, fmt.Sprintf("%s/%d", subject, i))
		if err != nil {
			return recs, nil, err
		}
		ls = append(ls, l)
		if own {
			break
		}
	}
	rec, l := recs[0], ls[0]
	for rec.Count(health.Renewed) < renewals {
		select {
		case <-rec.Notify():
		case <-l.Signal().Done():
			return recs, nil, fmt.Errorf("lost before the link was slowed: %w", l.Signal().Err())
		case <-ctx.Done():
			return recs, nil, fmt.Errorf("%d renewals: %w", renewals, ctx.Err())
		}
	}
	for _, r := range recs {
		slowedAt = append(slowedAt, len(r.Events()))
	}
	proxy.Delay(time.Duration(share * float64(slowedDeadline) / 2))
	for _, l := range ls {
		select {
		case <-l.Signal().Done():
		case <-ctx.Done():
			return recs, slowedAt, fmt.Errorf("the lease was not lost: %w", ctx.Err())
		}
	}
	proxy.Heal()
	// The loss is told right after the signal is lost.
	for _, r := range recs {
		for r.Count(health.Lost) == 0 {
			select {
			case <-r.Notify():
			case <-ctx.Done():
				return recs, slowedAt, fmt.Errorf("no Lost event after the loss: %w", ctx.Err())
			}
		}
	}
	return recs, slowedAt, nil
}

// warning is what a trial of TestAtRiskBeforeLoss saw of one lease: its
// first AtRisk after the link was slowed, and when it and the Lost event
// were told.
type warning struct {
	risk         health.Event
	told, lostAt time.Time
}

// warned checks the events of a lease after the link was slowed (from
// index from): a Lost event by the deadline, the last one, with an AtRisk
// before it. It reports what was wrong, or the warning.
func warned(rec *healthrec.Recorder, from int) (warning, error) {
	all := rec.Stamped()
	w, err := healthrec.AtRiskBeforeLoss(healthrec.Unstamp(all), healthrec.Trial{From: from})
	if err != nil {
		return warning{}, err
	}
	if e := all[w.Lost]; e.Via != health.Deadline {
		return warning{}, fmt.Errorf("lost via %v (%v), want the deadline", e.Via, e.Err)
	}
	return warning{all[w.Risk].Event, all[w.Risk].At, all[w.Lost].At}, nil
}

// TestAtRiskBeforeLoss: a link slowed until a round trip takes 80% of the
// deadline span loses the lease by its deadline, and AtRisk is told before
// the loss, and nothing after it, in each of 30 trials, on a shared session
// (to each of its two observed leases) and on a session of its own. The
// warning comes when a third of the span is left, the loss at the deadline:
// a third of the span (1 s) apart. The trials run 15 at a time, each with
// its proxy, pool, session and subjects.
func TestAtRiskBeforeLoss(t *testing.T) {
	const (
		trials   = 30
		parallel = 15
		share    = 0.8
	)
	for _, own := range []bool{false, true} {
		name := map[bool]string{false: "shared", true: "own"}[own]
		t.Run(name, func(t *testing.T) {
			type outcome struct {
				recs     []*healthrec.Recorder
				slowedAt []int
				err      error
			}
			out := make([]outcome, trials)
			sem := make(chan struct{}, parallel)
			var wg sync.WaitGroup
			for i := range trials {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					recs, at, err := slowedRun(ctx, own, fmt.Sprintf("at-risk %s %d", name, i), 2, share)
					out[i] = outcome{recs, at, err}
				})
			}
			wg.Wait()
			warnedIn, leases, unconfirmed := 0, 0, 0
			var left, lead []time.Duration
			for i, o := range out {
				if o.err != nil {
					t.Errorf("trial %d: %v", i, o.err)
					continue
				}
				all := true
				for k, rec := range o.recs {
					leases++
					w, err := warned(rec, o.slowedAt[k])
					if err != nil {
						t.Errorf("trial %d, lease %d: %v", i, k, err)
						all = false
						continue
					}
					if errors.Is(w.risk.Err, health.ErrUnconfirmed) {
						unconfirmed++
					}
					left = append(left, w.risk.Margin)
					lead = append(lead, w.lostAt.Sub(w.told))
				}
				if all {
					warnedIn++
				}
			}
			atWarning, toLost := healthrec.Summary{Trials: leases, Margins: left}, healthrec.Summary{Trials: leases, Margins: lead}
			if atWarning.Warned() > 0 {
				t.Logf("%s session, a round trip of %.0f%% of the %v deadline span: AtRisk before the loss in %d of %d trials (%d observed leases warned of %d, %d by the watch, health.ErrUnconfirmed); "+
					"time left before the deadline at the warning: median %v, least %v; the warning to the Lost event: median %v, least %v",
					name, share*100, slowedDeadline, warnedIn, trials, atWarning.Warned(), leases, unconfirmed,
					atWarning.Median().Round(time.Millisecond), atWarning.Least().Round(time.Millisecond),
					toLost.Median().Round(time.Millisecond), toLost.Least().Round(time.Millisecond))
			}
		})
	}
}
