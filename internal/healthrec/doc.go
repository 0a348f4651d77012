// Package healthrec gives the tests of every issuer one [Recorder] of the
// [health.Event]s a lease's observer is told, and one verdict on a trial
// whose link was slowed until the lease was lost: [AtRiskBeforeLoss], and
// the [Summary] of many trials that the tests log.
//
// It is internal: the issuers' modules in this repository import it from
// their tests, and nothing public depends on it.
package healthrec
