package health

import "time"

// The Notify functions are what issuers call at each event: each does
// nothing with a nil Observer, and with one sets the event's Kind (and the
// fields it derives), calls it, and reports AtRisk after where it applies.
// An issuer calls them after the fact they report, never before a loss.

// NotifyGranted reports a grant.
func NotifyGranted(o Observer, e Event) {
	if o == nil {
		return
	}
	e.Kind = Granted
	o.Observe(e)
}

// NotifyRenewed reports a renewal sent at e.Sent, confirmed at confirmed,
// which set the deadline e.Deadline: it sets RoundTrip and Margin, and
// reports AtRisk after it when the margin is [Thin].
func NotifyRenewed(o Observer, e Event, confirmed time.Time) {
	if o == nil {
		return
	}
	e.Kind = Renewed
	e.RoundTrip = confirmed.Sub(e.Sent)
	e.Margin = e.Deadline.Sub(confirmed)
	o.Observe(e)
	if Thin(e.Margin, e.Deadline.Sub(e.Sent)) {
		e.Kind = AtRisk
		o.Observe(e)
	}
}

// NotifyFailed reports a renewal that failed with e.Err, known at now,
// while the deadline e.Deadline is in force: it sets Margin, and reports
// AtRisk after it. A failure known at or past the deadline is not
// reported: a renewal cut by the deadline fails as the deadline loses the
// lease, and the Lost event that follows tells it; a warning then would
// come after the fact.
func NotifyFailed(o Observer, e Event, now time.Time) {
	if o == nil || !now.Before(e.Deadline) {
		return
	}
	e.Kind = RenewalFailed
	e.Margin = e.Deadline.Sub(now)
	o.Observe(e)
	e.Kind = AtRisk
	o.Observe(e)
}

// NotifyLost reports a loss; e.Err is the signal's error, e.Via how it was
// learned.
func NotifyLost(o Observer, e Event) {
	if o == nil {
		return
	}
	e.Kind = Lost
	o.Observe(e)
}

// NotifyReleased reports a release; e.Err is Unlock's error.
func NotifyReleased(o Observer, e Event) {
	if o == nil {
		return
	}
	e.Kind = Released
	o.Observe(e)
}
