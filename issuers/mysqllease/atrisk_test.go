package mysqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/mysqllease"
)

// slowedConfig is the configuration of the slowed-link trials: a
// ServerTimeout alone, whose defaults give a deadline span of 1.5 s
// (Margin 1.5 s) and a heartbeat every 300 ms.
var slowedConfig = mysqllease.Config{ServerTimeout: 3 * time.Second}

// slowedSpan is slowedConfig's deadline span, ServerTimeout − Margin.
const slowedSpan = 1500 * time.Millisecond

// slowedTrial holds leases leases (observed) and one unobserved beside them
// when shared, or one lease on a session of its own (Config.Alone), from a
// pool of its own through a proxy of its own; once the session's
// heartbeats were confirmed twice, it delays every byte of the link by
// share of the deadline span each way, so that a round trip takes 2 × share
// of it, waits for the loss, and returns each observed lease's events after
// its Unlock and the pool's close.
func slowedTrial(ctx context.Context, subj string, leases int, alone bool, share float64) ([][]healthrec.Stamped, error) {
	proxy, err := faultnet.Listen(server.Addr())
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	db, err := sql.Open("mysql", server.DSNAt(proxy.Addr(), "root", ""))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	recs := make([]*healthrec.Recorder, leases)
	var held []*mysqllease.Lease
	defer func() {
		for _, l := range held {
			l.Unlock(context.Background())
		}
	}()
	for i := range recs {
		recs[i] = &healthrec.Recorder{}
		cfg := slowedConfig
		cfg.Observer, cfg.Alone = recs[i], alone
		l, err := cfg.Lock(ctx, db, fmt.Sprintf("%s-%d", subj, i))
		if err != nil {
			return nil, err
		}
		held = append(held, l)
	}
	if !alone {
		l, err := slowedConfig.Lock(ctx, db, subj+"-unobserved")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
	}
	for recs[0].Count(health.Renewed) < 2 {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("two renewals: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	proxy.Delay(time.Duration(share * float64(slowedSpan)))
	for _, l := range held {
		select {
		case <-l.Signal().Done():
		case <-ctx.Done():
			return nil, fmt.Errorf("the lease was not lost: %w", ctx.Err())
		}
	}
	proxy.Heal()
	for _, r := range recs {
		for r.Count(health.Lost) == 0 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("no Lost event after the loss: %w", ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	for _, l := range held {
		l.Unlock(context.Background())
	}
	held = nil
	db.Close()
	out := make([][]healthrec.Stamped, len(recs))
	for i, r := range recs {
		out[i] = r.Stamped()
	}
	return out, nil
}

// TestAtRiskBeforeLoss: a link slowed until a round trip takes 80% of the
// deadline span loses the leases by their deadline, and each observed lease
// is told AtRisk by its session's warning (health.ErrUnconfirmed) before it
// is told Lost, and nothing after: 30 trials on a shared session (two
// observed leases and one unobserved on it) and 30 on a session of a
// lease's own, each with a pool and a proxy of its own, run at once.
func TestAtRiskBeforeLoss(t *testing.T) {
	const trials = 30
	for _, mode := range []struct {
		name   string
		leases int
		alone  bool
	}{{"shared", 2, false}, {"alone", 1, true}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			results := make([][][]healthrec.Stamped, trials)
			errs := make([]error, trials)
			var wg sync.WaitGroup
			for i := range trials {
				wg.Go(func() {
					results[i], errs[i] = slowedTrial(ctx, fmt.Sprintf("%s-%d", subject(t), i), mode.leases, mode.alone, 0.4)
				})
			}
			wg.Wait()
			warned, observed := 0, 0
			var lead []time.Duration
			for i, leases := range results {
				if errs[i] != nil {
					t.Errorf("trial %d: %v", i, errs[i])
					continue
				}
				for j, es := range leases {
					observed++
					if err := checkWarned(es); err != nil {
						t.Errorf("trial %d, lease %d: %v: %v", i, j, err, healthrec.Kinds(healthrec.Unstamp(es)))
						continue
					}
					warned++
					for _, e := range es {
						if e.Kind == health.AtRisk && errors.Is(e.Err, health.ErrUnconfirmed) {
							lead = append(lead, e.Deadline.Sub(e.At))
							break
						}
					}
				}
			}
			if sum := (healthrec.Summary{Trials: observed, Margins: lead}); sum.Warned() > 0 {
				t.Logf("%s: AtRisk (unconfirmed) before the loss for %d of %d observed leases in %d trials; %v before the deadline (median; least %v)",
					mode.name, warned, observed, trials, sum.Median(), sum.Least())
			}
		})
	}
}

// checkWarned returns an error unless es, the events of one lease lost to
// a slowed link, has an AtRisk of its session's warning before its one
// Lost, Lost by the deadline, and nothing after the Lost.
func checkWarned(es []healthrec.Stamped) error {
	w, err := healthrec.AtRiskBeforeLoss(healthrec.Unstamp(es), healthrec.Trial{})
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(es[:w.Lost], func(e healthrec.Stamped) bool {
		return e.Kind == health.AtRisk && errors.Is(e.Err, health.ErrUnconfirmed)
	}) {
		return fmt.Errorf("lost via %v with no AtRisk (unconfirmed) before it", es[w.Lost].Via)
	}
	if e := es[w.Lost]; e.Via != health.Deadline || !errors.Is(e.Err, mysqllease.ErrUnresponsive) {
		return fmt.Errorf("lost via %v with %v, want by the deadline, ErrUnresponsive", e.Via, e.Err)
	}
	return nil
}

// TestAtRiskGrantedLate: a lease granted on a session after its warning
// for the confirmation in force was told is told AtRisk right after its
// grant.
func TestAtRiskGrantedLate(t *testing.T) {
	db := open(t, server.DSN("root", ""))
	first := &healthrec.Recorder{}
	cfg := mysqllease.Config{ServerTimeout: 4 * time.Second, Heartbeat: 100 * time.Millisecond}
	b := lock(t, cfg, db, subject(t))
	defer b.Unlock(context.Background())
	cfg.Observer = first
	a := lock(t, cfg, db, subject(t))
	defer a.Unlock(context.Background())
	first.WaitFor(t, health.Renewed, 1)
	mysqllease.BreakHeartbeats(db, 1000)
	defer mysqllease.BreakHeartbeats(db, 0)
	for !slices.ContainsFunc(first.Events(), func(e health.Event) bool {
		return e.Kind == health.AtRisk && errors.Is(e.Err, health.ErrUnconfirmed)
	}) {
		select {
		case <-first.Notify():
		case <-time.After(waitTimeout):
			t.Fatalf("no warning: %v", healthrec.Kinds(first.Events()))
		}
	}
	rec := &healthrec.Recorder{}
	b.ObserveLate(rec)
	all := rec.Events()
	if len(all) < 2 || all[0].Kind != health.Granted || all[1].Kind != health.AtRisk || !errors.Is(all[1].Err, health.ErrUnconfirmed) || all[1].Margin <= 0 {
		t.Errorf("events = %v, want granted, then at risk with health.ErrUnconfirmed", healthrec.Kinds(all))
	}
}

// TestAtRiskNotPastDeadline: a warning whose timer runs after the deadline
// tells nothing: the loss that follows tells it.
func TestAtRiskNotPastDeadline(t *testing.T) {
	db := open(t, server.DSN("root", ""))
	rec := &healthrec.Recorder{}
	cfg := fast
	cfg.Observer = rec
	l := lock(t, cfg, db, subject(t))
	defer l.Unlock(context.Background())
	l.WarnPastDeadline()
	if all := rec.Events(); slices.ContainsFunc(all, func(e health.Event) bool { return e.Kind == health.AtRisk }) {
		t.Errorf("events = %v, want no at risk past the deadline", healthrec.Kinds(all))
	}
}
