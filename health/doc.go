// Package health tells an operator how close each lease is to its
// deadline: every issuer of this repository reports its leases' grants,
// renewals, failed renewals, losses and releases to an [Observer], and
// each issuer's Lease reads its own [Health] at any time.
//
// The events are for dashboards and alerts, not for the holder's decisions:
// a lease's [github.com/zukhruf/lease/signal.Signal] keeps its one meaning
// (lost or not), and an [AtRisk] event never loses it. [AtRisk] is the
// warning that comes before a loss: a renewal that failed, or one confirmed
// with less than 1/[RiskDivisor] of its span left before the deadline it set.
//
// The observer lives in a package of its own rather than in package lease:
// package lease is the portable API a holder writes against (Lease, Locker),
// and it stays that small; an observer is set by whoever configures an
// issuer, and a metrics adapter (a nested module, with its own
// dependencies) imports this package alone. Like package lease, it needs
// nothing but the standard library.
//
// A nil Observer costs nothing: the issuers check for it before they build
// an event, and the Notify functions do nothing with one, with no
// allocation (TestAllocs, BenchmarkNotify).
package health
