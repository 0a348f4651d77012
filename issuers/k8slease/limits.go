package k8slease

import (
	"fmt"
	"math"
	"reflect"
	"sync"
	"time"

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
	m  map[flowcontrol.RateLimiter]demand
}{m: make(map[flowcontrol.RateLimiter]demand)}

type demand struct {
	leases int
	rate   int64 // billionths of a request a second
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
	renew := max(time.Second, c.RenewPeriod.Truncate(time.Second))
	return perSecond * int64(time.Second) / int64(min(renew, c.RetryPeriod))
}

// reserve adds a lease of c to the demand on cs's rate limiter, or returns
// an error if the limiter cannot sustain it beside the leases already there.
// The func it returns takes the lease's share away again; call it once.
func (c Config) reserve(cs kubernetes.Interface) (func(), error) {
	rc := cs.CoordinationV1().RESTClient()
	if isNil(rc) {
		return func() {}, nil // a client without a REST client, such as client-go's fake: no limiter
	}
	rl := rc.GetRateLimiter()
	if isNil(rl) || rl.QPS() <= 0 || !reflect.ValueOf(rl).Comparable() {
		// rest.Config.QPS < 0: no client-side limit; or a limiter of the
		// caller's own that cannot be told apart from another, or that a
		// map cannot take as a key (a struct whose interface field holds
		// a map, say: a comparable type, an uncomparable value).
		return func() {}, nil
	}
	qps, need := float64(rl.QPS()), c.rate()
	demands.mu.Lock()
	defer demands.mu.Unlock()
	d := demands.m[rl]
	if d.rate+need > int64(leaseShare*qps*float64(perSecond)) {
		n, leases := d.leases+1, "leases"
		if n == 1 {
			leases = "lease"
		}
		rate := float64(d.rate+need) / float64(perSecond)
		return nil, fmt.Errorf("the clientset's rate limit, QPS %.4g, cannot sustain %d %s: they need up to %.3g requests a second, more than the half of it left to leases; set rest.Config.QPS to at least %d and Burst to at least %d (see the README: what you may get wrong)",
			qps, n, leases, rate, int(math.Ceil(rate/leaseShare)), n)
	}
	demands.m[rl] = demand{d.leases + 1, d.rate + need}
	var once sync.Once
	return func() {
		once.Do(func() {
			demands.mu.Lock()
			defer demands.mu.Unlock()
			d := demands.m[rl]
			d.leases--
			d.rate -= need
			if d.leases == 0 {
				delete(demands.m, rl)
			} else {
				demands.m[rl] = d
			}
		})
	}, nil
}
