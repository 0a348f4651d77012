package k8slease

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
)

// leaseShare is the part of a client's rate limit that the leases made
// through it may need: the rest is left to the reads after a conflict, the
// watches opened again, the releases, and the process's own requests, all
// of which wait in the same queue as the renewals.
const leaseShare = 0.5

// demands is what the leases of this process, held or waited for, need
// from each client-side rate limiter, in requests a second: a holder renews
// once a renewal period (rounded down to whole seconds), a waiting
// candidate reads once a retry period. kubernetes.NewForConfig gives each
// clientset one limiter, shared by all of its clients.
var demands = struct {
	mu sync.Mutex
	m  map[flowcontrol.RateLimiter]*demand
}{m: make(map[flowcontrol.RateLimiter]*demand)}

// demand is the account of one limiter. Guarded by demands.mu.
type demand struct {
	leases int
	rate   int64 // billionths of a request a second, reserved by every lease and waiting Lock
	renew  int64 // of which the held leases' renewals need this much
	qps    float64

	// acquires paces the requests of the Locks that wait (their reads and
	// their writes) to half of what the held leases' renewals leave of
	// the limiter's QPS: client-go's limiter serves requests in the order
	// they come, and a burst of Locks queued in it ahead of a renewal
	// would delay the renewal past its deadline. Renewals never wait here.
	acquires *rate.Limiter
	// scale is the part of that pace the apiserver is given now: halved
	// when a Lock's request fails or comes back slower than the renewals
	// of its lease could afford, doubled when one comes back in time, so
	// that waiting Locks do not crowd an apiserver that cannot answer them
	// (one just restarted, say) and the renewals that share it.
	scale   float64
	lastCut time.Time // when scale was last halved
}

// acquireShare is the part of what the renewals leave of a limiter's QPS
// that the requests of waiting Locks may take; the rest stays free for
// what shares the limiter with them (see leaseShare), so that client-go's
// queue drains and a renewal finds it short.
const acquireShare = 0.5

// acquireBurst is how many requests of waiting Locks go to client-go's
// limiter at once: the read and the write of one Lock's round.
const acquireBurst = 2

// minAcquireRate is the slowest pace of the Locks' requests: the reserve
// keeps the renewals inside half the QPS, so what they leave is never less
// than that half; the floor only keeps the pace positive.
const minAcquireRate = 0.01

// minScale bounds how far the pace of acquires is cut: to a thousandth,
// and never under a request a second (see paceAcquires).
const minScale = 1.0 / 1024

// paceAcquires sets d's pace of acquires from what its renewals leave and
// its scale.
func (d *demand) paceAcquires() {
	left := d.qps - float64(d.renew)/float64(perSecond)
	full := max(minAcquireRate, acquireShare*left)
	d.acquires.SetLimit(rate.Limit(max(min(1, full), full*d.scale)))
}

// perSecond is the unit of a demand: a billionth of a request a second.
// Integers add and subtract exactly, so the account of a limiter comes back
// to what it was whatever the order of Locks and releases; a float64 sum
// keeps each rounding error and, after many, refuses a lease that fits.
const perSecond = int64(time.Second)

// rate returns the billionths of a request a second a lease of c needs at
// most: the larger of a holder's renewals and a waiting candidate's reads,
// rounded down by less than a billionth.
func (c Config) rate() int64 {
	return perSecond * int64(time.Second) / int64(min(c.renewStep(), c.RetryPeriod))
}

// renewRate returns the billionths of a request a second a held lease of c
// renews with.
func (c Config) renewRate() int64 {
	return perSecond * int64(time.Second) / int64(c.renewStep())
}

// renewStep is the time between two renewals: RenewPeriod rounded down to
// whole seconds, at least one.
func (c Config) renewStep() time.Duration {
	return max(time.Second, c.RenewPeriod.Truncate(time.Second))
}

// share is a lease's part of its clientset's rate limit, from its Lock to
// its end. The zero share, of a clientset with no limiter to count, paces
// nothing.
type share struct {
	rl    flowcontrol.RateLimiter // nil: not counted
	need  int64                   // reserved
	renew int64                   // the renewals' part once held, 0 before

	once sync.Once
}

// reserve adds a lease of c to the demand on cs's rate limiter, or returns
// an error if the limiter cannot sustain it beside the leases already there.
// Call the share's release once.
func (c Config) reserve(cs kubernetes.Interface) (*share, error) {
	rc := cs.CoordinationV1().RESTClient()
	if isNil(rc) {
		return &share{}, nil // a client without a REST client, such as client-go's fake: no limiter
	}
	rl := rc.GetRateLimiter()
	if isNil(rl) || rl.QPS() <= 0 || !reflect.ValueOf(rl).Comparable() {
		// rest.Config.QPS < 0: no client-side limit; or a limiter of the
		// caller's own that cannot be told apart from another, or that a
		// map cannot take as a key (a struct whose interface field holds
		// a map, say: a comparable type, an uncomparable value).
		return &share{}, nil
	}
	qps, need := float64(rl.QPS()), c.rate()
	demands.mu.Lock()
	defer demands.mu.Unlock()
	d := demands.m[rl]
	if d == nil {
		d = &demand{qps: qps, acquires: rate.NewLimiter(0, acquireBurst), scale: 1}
		d.paceAcquires()
	}
	if d.rate+need > int64(leaseShare*qps*float64(perSecond)) {
		n, leases := d.leases+1, "leases"
		if n == 1 {
			leases = "lease"
		}
		rate := float64(d.rate+need) / float64(perSecond)
		return nil, fmt.Errorf("the clientset's rate limit, QPS %.4g, cannot sustain %d %s: they need up to %.3g requests a second, more than the half of it left to leases; set rest.Config.QPS to at least %d and Burst to at least %d (see the README: what you may get wrong)",
			qps, n, leases, rate, int(math.Ceil(rate/leaseShare)), n)
	}
	d.leases++
	d.rate += need
	demands.m[rl] = d
	return &share{rl: rl, need: need}, nil
}

// admit waits until a request of a waiting Lock may go to the clientset's
// limiter, or ctx ends; it returns ctx.Err() then. It waits for ctx's end
// itself, as a Lock does: a pace that reaches past ctx's deadline is no
// mistake of the caller's.
func (s *share) admit(ctx context.Context) error {
	if s.rl == nil {
		return ctx.Err()
	}
	demands.mu.Lock()
	r := demands.m[s.rl].acquires.Reserve()
	demands.mu.Unlock()
	d := r.Delay()
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	}
}

// answered adapts the pace of acquires to a Lock's request that took took
// and failed, or not, for a reason that may be the apiserver's load (a
// timeout, a 429 or 5xx, a connection lost): halved if it failed so or took
// more than slow, at most once a round trip (the requests of one crowd are
// one signal), and doubled otherwise.
func (s *share) answered(took, slow time.Duration, overloaded bool) {
	if s.rl == nil {
		return
	}
	demands.mu.Lock()
	defer demands.mu.Unlock()
	d := demands.m[s.rl]
	now := time.Now()
	switch {
	case !overloaded && took <= slow:
		d.scale = min(1, 2*d.scale)
	case now.Sub(d.lastCut) < took:
		return
	default:
		d.lastCut = now
		d.scale = max(minScale, d.scale/2)
	}
	d.paceAcquires()
}

// hold counts the renewals of the lease granted to c's Lock: they come
// before the Locks that wait.
func (s *share) hold(c Config) {
	if s.rl == nil {
		return
	}
	demands.mu.Lock()
	defer demands.mu.Unlock()
	d := demands.m[s.rl]
	s.renew = c.renewRate()
	d.renew += s.renew
	d.paceAcquires()
}

// release gives the share back. Successive calls do nothing more.
func (s *share) release() {
	if s.rl == nil {
		return
	}
	s.once.Do(func() {
		demands.mu.Lock()
		defer demands.mu.Unlock()
		d := demands.m[s.rl]
		d.leases--
		d.rate -= s.need
		d.renew -= s.renew
		if d.leases == 0 {
			delete(demands.m, s.rl)
			return
		}
		d.paceAcquires()
	})
}
