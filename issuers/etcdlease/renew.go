package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zukhruf/lease/health"
)

// The deadline rule. etcd counts a lease's TTL from the moment its leader
// processes a renewal, and that moment comes after the client sent it. So
// etcd may expire the session's lease no earlier than
//
//	send time of the last renewal etcd confirmed + the TTL etcd granted in that confirmation
//
// and the lease is lost at that time less a margin, unless a later renewal
// was confirmed by then. The times are read from this process's monotonic
// clock; the rule assumes that it and the clock of etcd's leader advance at
// rates that differ by less than margin/TTL, and the margin also covers the
// delay between the moment the deadline comes and the moment the loss is
// made. A new leader counts every lease's TTL again from its election, plus
// an election timeout, so a leader change only moves etcd's expiry later.
// This is the rule of client-go's leader election, RenewDeadline <
// LeaseDuration, anchored to the renewal's send time as
// riverqueue/river#1213 does, and not to the arrival of the answer, as etcd's
// client lessor does.

const (
	// defaultMarginDivisor sets the default margin: a tenth of the TTL etcd
	// granted.
	defaultMarginDivisor = 10
	// renewalsPerTTL is how many renewals the lease sends per TTL. A renewal
	// sent every TTL/6 keeps the lease through a round trip of up to
	// TTL - TTL/6 - margin: with the default margin, about 0.73 TTL, and
	// with latency of TTL/4 each way, a round trip of TTL/2, leaves TTL/4 to
	// spare.
	renewalsPerTTL = 6
	// firstInterval paces the renewals before etcd has told the TTL.
	firstInterval = 250 * time.Millisecond
	// retryFirst is the pause before the first attempt to open a new
	// renewal stream after one failed; each later pause, until a stream
	// gets an answer, is twice the one before, at most retryMax and, once
	// etcd told the TTL, the interval between two renewals: after the
	// first few, at most one attempt a second.
	retryFirst = 50 * time.Millisecond
	retryMax   = time.Second

	// MinMargin is the smallest margin [WithMargin] takes: the margin also
	// covers the delay between the deadline and the moment this process
	// runs its timer and makes the loss, which a shorter one cannot.
	MinMargin = time.Millisecond
)

// An Option changes how [Lock] and [Campaign] keep a lease.
type Option func(*options)

type options struct {
	margin   time.Duration // < 0: the default
	observer health.Observer
}

// WithMargin sets the margin of the local deadline: the lease is lost margin
// before the earliest moment etcd may expire the session's etcd lease,
// unless a renewal sent since was confirmed. The default is a tenth of the
// TTL etcd granted. A margin must cover the difference between the rates of
// this process's clock and etcd's over one TTL, and the delay with which this
// process acts on a timer; [Lock] and [Campaign] refuse one of half the TTL
// or more, which leaves the renewals no time to be confirmed.
//
// WithMargin panics if margin is negative; Lock and Campaign refuse a
// margin under MinMargin.
func WithMargin(margin time.Duration) Option {
	if margin < 0 {
		panic("etcdlease: WithMargin called with a negative margin")
	}
	return func(o *options) { o.margin = margin }
}

// renewer renews the etcd lease of a session on a keepalive stream of its
// own, beside the session's, and keeps the local deadline: the send time of
// the last renewal etcd confirmed, plus the TTL it granted, less the margin.
// When the deadline comes, or etcd answers that it has no such lease, it
// loses the lease it is attached to, from its own timer, whatever else the
// lease is doing.
type renewer struct {
	lc     pb.LeaseClient
	id     clientv3.LeaseID
	margin time.Duration // < 0: the default

	stop   context.CancelFunc
	done   chan struct{} // closed when run returns
	failed chan struct{} // closed when loss is set
	first  chan struct{} // closed at etcd's first answer

	mu       sync.Mutex
	sent     time.Time     // send time of the last confirmed renewal
	ttl      time.Duration // the TTL granted in that confirmation
	deadline time.Time
	timer    *time.Timer
	loss     error       // set once: the deadline passed, etcd has no lease or refused to renew it
	lose     func(error) // the attached lease's loss, nil before attach
	last     error       // why the last renewal stream ended

	left          time.Duration                             // deadline - the time the renewal at sent was confirmed
	renewed       func(sent, deadline, confirmed time.Time) // nil, or told of each confirmation
	failedRenewal func(err error, deadline time.Time)       // nil, or told of each renewal stream that failed
	atRisk        func(deadline time.Time)                  // nil, or told when the risk timer fires
	observers     int                                       // leases on the renewer with an observer
	risk          *time.Timer                               // nil until armed: fires at riskAt(sent, riskFor)
	riskFor       time.Time                                 // the deadline the risk timer was armed for, or warned of
	ended         bool                                      // run returned: nothing is armed any more
}

// startRenewing starts renewing the etcd lease of s and returns once etcd
// confirmed a first renewal, or told that it has no such lease (the renewer
// then holds the loss), or ctx ended. The caller stops the renewer with
// close, or hands it to a lease with attach.
//
// With withSession, startRenewing fails when s has ended, or ends before
// the first confirmation.
func startRenewing(ctx context.Context, s *concurrency.Session, opts []Option, withSession bool) (*renewer, error) {
	o, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := checkSession(s, withSession); err != nil {
		return nil, err
	}
	r := newRenewer(s, o.margin)
	var ended <-chan struct{} // nil: the renewer may outlive the session, to tell why it ended
	if withSession {
		ended = s.Done()
	}
	if err := r.waitFirst(ctx, s, ended); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// parseOptions applies opts and refuses a margin under its floor.
func parseOptions(opts []Option) (options, error) {
	o := options{margin: -1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.margin >= 0 && o.margin < MinMargin {
		return o, fmt.Errorf("margin %v is under its floor %v: it must also cover the delay with which this process runs its timer", o.margin, MinMargin)
	}
	return o, nil
}

// checkSession refuses a session whose client was closed, and, with
// withSession, one that ended.
func checkSession(s *concurrency.Session, withSession bool) error {
	if err := s.Client().Ctx().Err(); err != nil {
		return fmt.Errorf("the session's etcd client was closed: %w", err)
	}
	if withSession {
		select {
		case <-s.Done():
			return fmt.Errorf("%w: session %x ended before Lock (closed, orphaned, or its etcd lease gone)", ErrSessionClosed, s.Lease())
		default:
		}
	}
	return nil
}

// newRenewer starts renewing the etcd lease of s with margin (< 0: the
// default).
func newRenewer(s *concurrency.Session, margin time.Duration) *renewer {
	rctx, stop := context.WithCancel(context.Background())
	r := &renewer{
		lc:     pb.NewLeaseClient(s.Client().ActiveConnection()),
		id:     s.Lease(),
		margin: margin,
		stop:   stop,
		done:   make(chan struct{}),
		failed: make(chan struct{}),
		first:  make(chan struct{}),
	}
	go r.run(rctx)
	return r
}

// waitFirst returns once etcd confirmed a first renewal, or told that it
// has no such lease (the renewer then holds the loss), and fails if ctx
// ends, the client is closed or ended closes first, or the renewal was
// refused, or the margin does not fit the TTL etcd granted. Many callers
// may wait at once.
func (r *renewer) waitFirst(ctx context.Context, s *concurrency.Session, ended <-chan struct{}) error {
	var err error
	select {
	case <-r.first:
	case <-r.failed:
	case <-ctx.Done():
		err = fmt.Errorf("no renewal of etcd lease %x confirmed: %w", r.id, context.Cause(ctx))
	case <-s.Client().Ctx().Done():
		err = fmt.Errorf("no renewal of etcd lease %x confirmed: the client was closed", r.id)
	case <-ended:
		err = fmt.Errorf("%w: no renewal of etcd lease %x confirmed before the session ended: its client's own renewals went unanswered for its TTL, or it was closed",
			ErrSessionClosed, r.id)
	}
	if err != nil {
		if last := r.lastErr(); last != nil {
			err = fmt.Errorf("%w; the last renewal stream ended with: %w", err, last)
		}
		return err
	}
	r.mu.Lock()
	loss, ttl := r.loss, r.ttl
	r.mu.Unlock()
	if loss != nil && errors.Is(loss, ErrRenewalRefused) {
		return loss
	}
	if loss == nil && r.margin >= ttl/2 {
		return fmt.Errorf("margin %v is not less than half the TTL %v etcd granted", r.margin, ttl)
	}
	return nil
}

// lastErr returns why the last renewal stream ended, nil if none did.
func (r *renewer) lastErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// grantedTTL returns the TTL etcd granted in the last confirmed renewal,
// 0 if none was confirmed.
func (r *renewer) grantedTTL() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ttl
}

// attach makes lose the loss of the lease the renewer keeps, and calls it at
// once if the renewer already lost it.
func (r *renewer) attach(lose func(error)) {
	r.mu.Lock()
	loss := r.loss
	if loss == nil {
		r.lose = lose
	}
	r.mu.Unlock()
	if loss != nil {
		lose(loss)
	}
}

// close stops renewing and waits for the renewer's goroutines.
func (r *renewer) close() {
	r.stop()
	<-r.done
}

// gone reports whether etcd answered that it has no lease of the session.
func (r *renewer) gone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loss != nil && errors.Is(r.loss, ErrSessionExpired)
}

// lastConfirmed describes the last confirmed renewal and the deadline, for
// the causes of a loss.
func (r *renewer) lastConfirmed() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.describe()
}

func (r *renewer) describe() string {
	return fmt.Sprintf("the last renewal of etcd lease %x that etcd confirmed was sent at %s with a TTL of %v: deadline %s (margin %v)",
		r.id, clock(r.sent), r.ttl, clock(r.deadline), r.marginFor(r.ttl))
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func (r *renewer) marginFor(ttl time.Duration) time.Duration {
	if r.margin >= 0 {
		return r.margin
	}
	return ttl / defaultMarginDivisor
}

// confirm records that etcd confirmed, with a TTL of ttl, the renewal sent
// at sent, and moves the deadline.
func (r *renewer) confirm(sent time.Time, ttl time.Duration) {
	r.mu.Lock()
	if r.loss != nil || !sent.After(r.sent) {
		r.mu.Unlock()
		return
	}
	r.sent, r.ttl = sent, ttl
	r.deadline = sent.Add(ttl - r.marginFor(ttl))
	now := time.Now()
	r.left = r.deadline.Sub(now)
	if r.timer == nil {
		r.timer = time.AfterFunc(r.left, r.expire)
	} else {
		r.timer.Reset(r.left)
	}
	r.armRisk(now)
	renewed, deadline := r.renewed, r.deadline
	r.mu.Unlock()
	if renewed != nil {
		renewed(sent, deadline, now)
	}
}

// riskAt returns the moment a deadline set by a renewal sent at sent comes
// within 1/[health.RiskDivisor] of its span, as [health.Watch] counts it.
func riskAt(sent, deadline time.Time) time.Time {
	return deadline.Add(-deadline.Sub(sent) / health.RiskDivisor)
}

// armRisk arms the risk timer for the deadline in force, once per
// deadline, while a lease on the renewer has an observer; r.mu is held. A
// deadline whose risk point has passed by now is not armed for: a renewal
// confirmed that late was reported at risk with it (health.NotifyRenewed),
// and a lease granted that late is told by notifyGranted.
//
// The timer is the renewer's, not a [health.Watch] per lease: the deadline
// is the session's, kept here under r.mu and stopped with the deadline's
// own timer, and one timer tells every observed lease on the session, the
// way the renewals are told.
func (r *renewer) armRisk(now time.Time) {
	if r.observers == 0 || r.loss != nil || r.ended || r.deadline.IsZero() || r.riskFor.Equal(r.deadline) {
		return
	}
	r.riskFor = r.deadline
	at := riskAt(r.sent, r.deadline)
	if !now.Before(at) {
		if r.risk != nil {
			r.risk.Stop() // armed for an earlier deadline, which this one replaced
		}
		return
	}
	if r.risk == nil {
		r.risk = time.AfterFunc(at.Sub(now), r.warn)
	} else {
		r.risk.Reset(at.Sub(now))
	}
}

// warn tells the observed leases that their deadline is near and no
// renewal since was confirmed: the risk timer's func. It tells nothing if
// the lease was lost, or a confirmation moved the deadline as the timer
// fired, or the deadline is no longer ahead: the loss that follows tells
// it, as [health.NotifyFailed] does.
func (r *renewer) warn() { r.warnAt(time.Now()) }

// warnAt is warn as the timer would do it at now.
func (r *renewer) warnAt(now time.Time) {
	r.mu.Lock()
	deadline, tell := r.deadline, r.atRisk
	fire := r.loss == nil && r.observers > 0 && tell != nil && !now.Before(riskAt(r.sent, r.deadline)) && now.Before(deadline)
	r.mu.Unlock()
	if fire {
		tell(deadline)
	}
}

// expire loses the lease if its deadline has come: the timer's func.
func (r *renewer) expire() {
	r.mu.Lock()
	if r.loss != nil || time.Now().Before(r.deadline) {
		r.mu.Unlock() // a confirmation moved the deadline as the timer fired
		return
	}
	r.fail(fmt.Errorf("%w: %s", ErrRenewalUnconfirmed, r.describe()))
}

// fail records loss, the first one, stops the deadline's timer, loses the
// attached lease, and then stops the renewals and the risk timer. r.mu is
// held and fail releases it, so that the loss is made outside.
func (r *renewer) fail(loss error) {
	if r.loss != nil {
		r.mu.Unlock()
		return
	}
	r.loss = loss
	close(r.failed)
	if r.timer != nil {
		r.timer.Stop()
	}
	lose := r.lose
	r.mu.Unlock()
	if lose != nil {
		lose(loss)
	}
	// The renewals and the risk timer are stopped after the loss, never
	// before it: nothing runs between knowing of the loss and losing. A
	// timer that fires meanwhile tells nothing, as warn sees r.loss.
	r.stop()
	r.mu.Lock()
	if r.risk != nil {
		r.risk.Stop()
	}
	r.mu.Unlock()
}

// interval returns the time between two renewals.
func (r *renewer) interval() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ttl == 0 {
		return firstInterval
	}
	return r.ttl / renewalsPerTTL
}

// run renews the lease until ctx ends or the lease is lost, on one stream
// after another; r.first is closed at the first answer.
func (r *renewer) run(ctx context.Context) {
	first := r.first
	defer close(r.done)
	defer func() {
		r.mu.Lock()
		if r.timer != nil {
			r.timer.Stop()
		}
		if r.risk != nil {
			r.risk.Stop()
		}
		r.ended = true
		r.mu.Unlock()
	}()
	pause := retryFirst
	for ctx.Err() == nil {
		answered, err := r.stream(ctx, &first)
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.last = err
		if status.Code(err) == codes.PermissionDenied {
			// etcd refuses to renew a lease whose keys the role may no
			// longer write: it will expire it, and retrying asks in
			// vain. A false loss if the permission comes back in time.
			r.fail(fmt.Errorf("%w: etcd refused to renew etcd lease %x: %w", ErrRenewalRefused, r.id, err))
			return
		}
		failed, deadline := r.failedRenewal, r.deadline
		r.mu.Unlock()
		if failed != nil {
			failed(err, deadline)
		}
		if answered {
			pause = retryFirst
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		pause = min(2*pause, retryMax)
		r.mu.Lock()
		if r.ttl > 0 {
			pause = min(pause, r.ttl/renewalsPerTTL) // no later than the next renewal was due
		}
		r.mu.Unlock()
	}
}

// stream renews the lease on one keepalive stream until the stream fails or
// ctx ends, and returns whether etcd answered on it and why it ended. Each
// answer is matched to the oldest renewal not yet answered: etcd answers the
// renewals of a stream in order.
func (r *renewer) stream(ctx context.Context, first *chan struct{}) (answered bool, ended error) {
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	st, err := r.lc.LeaseKeepAlive(sctx)
	if err != nil {
		return false, fmt.Errorf("open a renewal stream: %w", err)
	}
	answers := make(chan *pb.LeaseKeepAliveResponse)
	failed := make(chan struct{})
	var recvErr error // set before failed is closed
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(failed)
		for {
			resp, err := st.Recv()
			if err != nil {
				recvErr = err
				return
			}
			select {
			case answers <- resp:
			case <-sctx.Done():
				return
			}
		}
	}()

	var sent []time.Time // the send times of the renewals not yet answered
	send := func() error {
		sent = append(sent, time.Now()) // before the send: never later than etcd's receipt
		return st.Send(&pb.LeaseKeepAliveRequest{ID: int64(r.id)})
	}
	if err := send(); err != nil {
		return false, fmt.Errorf("send a renewal: %w", err)
	}
	every := r.interval()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-sctx.Done():
			return answered, sctx.Err()
		case <-failed:
			return answered, fmt.Errorf("receive a renewal's answer: %w", recvErr)
		case <-tick.C:
			if err := send(); err != nil {
				return answered, fmt.Errorf("send a renewal: %w", err)
			}
		case resp := <-answers:
			answered = true
			at := sent[0]
			sent = sent[1:]
			if resp.TTL <= 0 {
				r.mu.Lock()
				r.fail(fmt.Errorf("%w: etcd has no lease %x any more: it answered so the renewal sent at %s",
					ErrSessionExpired, r.id, clock(at)))
			} else {
				r.confirm(at, time.Duration(resp.TTL)*time.Second)
			}
			if *first != nil {
				close(*first)
				*first = nil
			}
			if d := r.interval(); d != every {
				every = d
				tick.Reset(every)
			}
		}
	}
}
