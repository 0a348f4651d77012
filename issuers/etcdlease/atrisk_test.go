package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/etcdlease"
)

const (
	// riskTTL is the TTL, in seconds, of the sessions of the at-risk
	// trials: etcd's least with its default election timeout, a deadline
	// span of 1.8 s with the default margin.
	riskTTL = 2
	// riskTrials is how many trials each slowed link runs.
	riskTrials = 30
	// riskAtOnce is how many trials run at once, each on a client, a
	// session, a proxy and a key of its own.
	riskAtOnce = 10
)

// slowed is the outcome of one at-risk trial.
type slowed struct {
	events []health.Event
	span   time.Duration // the deadline's span: TTL less the margin
	loss   error
}

// slowedTrial holds a lease of a session whose client reaches etcd through
// a proxy, lets two renewals of the session be confirmed, then delays every
// byte of the link by half of share of the deadline span each way (a round
// trip of share of the span), and waits for the loss and its event.
func slowedTrial(ctx context.Context, endpoint, key string, share float64) (slowed, error) {
	var out slowed
	px, err := faultnet.Listen(endpoint)
	if err != nil {
		return out, err
	}
	defer px.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{px.Addr()}, DialTimeout: hang, Logger: zap.NewNop()})
	if err != nil {
		return out, err
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(riskTTL), concurrency.WithContext(ctx))
	if err != nil {
		return out, err
	}
	defer s.Orphan() // the client's close ends it
	rec := &healthrec.Recorder{}
	l, err := etcdlease.Lock(ctx, s, key, etcdlease.WithObserver(rec))
	if err != nil {
		return out, err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		l.Unlock(uctx) // the key goes with the session if this release fails
	}()
	if _, err := rec.Await(ctx, health.Renewed, 2); err != nil {
		return out, err
	}
	h := l.Health()
	out.span = h.Deadline.Sub(h.Renewed)
	px.Delay(time.Duration(share * float64(out.span) / 2))
	select {
	case <-l.Signal().Done():
	case <-ctx.Done():
		out.events = rec.Events()
		return out, fmt.Errorf("not lost: %w", ctx.Err())
	}
	px.Heal()
	out.loss = l.Signal().Err()
	// The loss's event is reported right after the signal is lost.
	_, err = rec.Await(ctx, health.Lost, 1)
	out.events = rec.Events()
	return out, err
}

// TestAtRiskBeforeLoss: a lease whose link to etcd is slowed until a
// round trip takes 80% of the deadline span, or more than the span, is
// lost, and its observer was told AtRisk before the Lost event and nothing
// after it, in each of 30 trials of each. At 80% the session's keep-alives
// are still confirmed, each with less than a third of the span left
// (health.Thin), until a loss; above the span none is confirmed, the
// renewal stream stays open, and only the renewer's risk timer, a third of
// the span before the deadline, can warn.
func TestAtRiskBeforeLoss(t *testing.T) {
	// Not parallel: its sessions of 2 s run alone, after TestFaults.
	srv := startEtcd(t)
	for _, c := range []struct {
		name  string
		share float64
	}{
		{"round trip 80% of the span", 0.8},
		{"round trip twice the span", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			results := make([]slowed, riskTrials)
			errs := make([]error, riskTrials)
			var wg sync.WaitGroup
			sem := make(chan struct{}, riskAtOnce)
			for i := range riskTrials {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					results[i], errs[i] = slowedTrial(ctx, srv.Endpoint(), fmt.Sprintf("/risk/%v/%d", c.share, i), c.share)
				})
			}
			wg.Wait()
			timer := 0
			sum := healthrec.Summary{Trials: riskTrials}
			via := map[string]int{}
			for i, r := range results {
				if errs[i] != nil {
					t.Errorf("trial %d: %v; events %v", i, errs[i], healthrec.Kinds(r.events))
					continue
				}
				if j := slices.IndexFunc(r.events, func(e health.Event) bool { return e.Kind == health.Lost }); j >= 0 {
					via[fmt.Sprintf("%v %v", r.events[j].Via, causeName(r.loss))]++
				}
				w, err := healthrec.AtRiskBeforeLoss(r.events, healthrec.Trial{})
				if err != nil {
					t.Errorf("trial %d (%v): %v", i, r.loss, err)
					continue
				}
				if errors.Is(r.events[w.Risk].Err, health.ErrUnconfirmed) {
					timer++
				}
				sum.Margins = append(sum.Margins, w.Margin)
			}
			if sum.Warned() > 0 {
				t.Logf("AtRisk before the loss in %d of %d trials (%d by the risk timer), %v before the deadline (median; least %v), span %v; losses %v",
					sum.Warned(), riskTrials, timer, sum.Median(), sum.Least(), results[0].span, via)
			}
		})
	}
}

// causeName names the cause of a loss among the package's.
func causeName(err error) string {
	for _, c := range causes {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return fmt.Sprint(err)
}

// waitRenewed waits until etcd confirmed a renewal of l's session sent
// after the one confirmed when it was called.
func waitRenewed(t *testing.T, l *etcdlease.Lease) {
	t.Helper()
	before := etcdlease.RenewedAt(l)
	guard := time.Now().Add(hang)
	for !etcdlease.RenewedAt(l).After(before) {
		if time.Now().After(guard) {
			t.Fatalf("no renewal confirmed within %v", hang)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAtRiskTimerOnlyWhenObserved: the renewer of a session on which no
// lease has an observer makes no risk timer; once one has, each confirmed
// renewal arms it for the new deadline; once that lease is released, the
// renewals arm it no more.
func TestAtRiskTimerOnlyWhenObserved(t *testing.T) {
	t.Parallel()
	s := newSession(t, startEtcd(t))
	bare := mustLock(t, s, lockName)
	waitRenewed(t, bare)
	waitRenewed(t, bare)
	if _, made := etcdlease.RiskArmed(bare); made {
		t.Errorf("with no observer, the renewer made a risk timer")
	}
	rec := &healthrec.Recorder{}
	observed := mustLock(t, s, "/locks/observed", etcdlease.WithObserver(rec))
	waitRenewed(t, bare)
	if armed, _ := etcdlease.RiskArmed(bare); !armed {
		t.Errorf("with an observed lease, the risk timer is not armed for the deadline in force")
	}
	checkRelease(t, "Unlock", observed.Unlock)
	waitRenewed(t, bare)
	if armed, _ := etcdlease.RiskArmed(bare); armed {
		t.Errorf("after the observed lease's release, a renewal armed the risk timer")
	}
	if got := rec.Events(); got[len(got)-1].Kind != health.Released {
		t.Errorf("events = %v, want the release last", healthrec.Kinds(got))
	}
	checkRelease(t, "Unlock", bare.Unlock)
}

// TestAtRiskTimerStoppedWithSession: the risk timer of a session is
// stopped once its renewals stop, whether an operator revoked its etcd
// lease (a loss, which stops the timer itself) or the holder released its
// lease and closed the session (no loss), and the observer hears nothing
// after the lease's last event.
func TestAtRiskTimerStoppedWithSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		last health.Kind
		end  func(t *testing.T, op *clientv3.Client, s *concurrency.Session, l *etcdlease.Lease)
	}{
		{"revoked", health.Lost, func(t *testing.T, op *clientv3.Client, s *concurrency.Session, l *etcdlease.Lease) {
			revoke(t, op, s)
			waitLost(t, l.Signal(), hang)
		}},
		{"closed", health.Released, func(t *testing.T, op *clientv3.Client, s *concurrency.Session, l *etcdlease.Lease) {
			if err := l.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, op := startEtcdWithOp(t)
			s := newSession(t, srv)
			rec := &healthrec.Recorder{}
			l := mustLock(t, s, lockName, etcdlease.WithObserver(rec))
			waitRenewed(t, l)
			if armed, _ := etcdlease.RiskArmed(l); !armed {
				t.Fatalf("the risk timer is not armed for the deadline in force")
			}
			tc.end(t, op, s, l)
			guard := time.Now().Add(hang)
			for {
				ended, pending := etcdlease.RiskEnded(l)
				if ended {
					if pending {
						t.Errorf("the renewals stopped, and the risk timer was still pending")
					}
					break
				}
				if time.Now().After(guard) {
					t.Fatalf("the renewals did not stop within %v of the session's end", hang)
				}
				time.Sleep(10 * time.Millisecond)
			}
			all := rec.WaitFor(t, tc.last, 1)
			if last := all[len(all)-1]; last.Kind != tc.last {
				t.Errorf("events = %v, want %v last", healthrec.Kinds(all), tc.last)
			}
		})
	}
}

// TestAtRiskGrantedLate: a lease granted on a session whose keep-alives
// went unanswered past the risk point of the deadline in force, after the
// risk timer fired, is told AtRisk right after its grant, then its loss.
func TestAtRiskGrantedLate(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	px := startProxy(t, srv.Endpoint())
	s := newSessionOn(t, proxyClient(t, px))
	firstRec := &healthrec.Recorder{}
	first := mustLock(t, s, lockName, etcdlease.WithObserver(firstRec))
	waitRenewed(t, first)
	px.Drop(faultnet.Both)
	firstRec.WaitFor(t, health.AtRisk, 1) // the risk timer fired
	h := first.Health()
	rec := &healthrec.Recorder{}
	l, err := etcdlease.StartObserved(t.Context(), s, "/locks/late", rec)
	if err != nil {
		t.Fatal(err)
	}
	waitLost(t, l.Signal(), hang)
	all := rec.WaitFor(t, health.Lost, 1)
	if !slices.Equal(healthrec.Kinds(all), []health.Kind{health.Granted, health.AtRisk, health.Lost}) {
		t.Errorf("events = %v, want granted, at risk, lost", healthrec.Kinds(all))
	} else if !errors.Is(all[1].Err, health.ErrUnconfirmed) || all[1].Margin >= h.Deadline.Sub(h.Renewed)/health.RiskDivisor {
		t.Errorf("at risk: %v with %v left, want health.ErrUnconfirmed with under a third of the span left", all[1].Err, all[1].Margin)
	}
	px.Heal()
	px.Cut()
	l.Unlock(t.Context())
	first.Unlock(t.Context())
}

// TestAtRiskNotPastDeadline: a risk timer that fires once the deadline in
// force has passed tells nothing; the loss that follows tells it.
func TestAtRiskNotPastDeadline(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	s := newSession(t, srv)
	rec := &healthrec.Recorder{}
	l := mustLock(t, s, lockName, etcdlease.WithObserver(rec))
	waitRenewed(t, l)
	// An hour past: no renewal since moved the deadline that far.
	etcdlease.WarnAtDeadline(l, time.Hour)
	if n := rec.Count(health.AtRisk); n != 0 {
		t.Errorf("AtRisk told %d times past the deadline, want 0", n)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
