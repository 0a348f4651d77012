package healthrec

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/zukhruf/lease/health"
)

// Trial says which events of a trial [AtRiskBeforeLoss] reads.
type Trial struct {
	// From is the index of the first event that may warn: the events
	// before it came before the fault (a renewal made slow by a loaded
	// machine) and warn of nothing that follows.
	From int
	// TimeLeft, if set, also finds wrong a RenewalFailed or an AtRisk told
	// with no time left before its deadline: past the deadline only the
	// Lost event may tell.
	TimeLeft bool
}

// Warning is the first AtRisk event of a trial that warned in time.
type Warning struct {
	// Risk and Lost are the indexes of the warning and of the Lost event.
	Risk, Lost int
	// Margin is the warning's time left before its deadline.
	Margin time.Duration
}

// AtRiskBeforeLoss checks one trial's events, in the order told, for a
// lease lost with a warning: one Lost event, the last; an AtRisk at or
// after tr.From before it; and, with tr.TimeLeft, no RenewalFailed or
// AtRisk with no time left. It returns the first such AtRisk, or an error
// that joins each thing found wrong.
func AtRiskBeforeLoss(events []health.Event, tr Trial) (Warning, error) {
	var wrong []error
	if tr.TimeLeft {
		for _, e := range events {
			if (e.Kind == health.AtRisk || e.Kind == health.RenewalFailed) && e.Margin <= 0 {
				wrong = append(wrong, fmt.Errorf("healthrec: %v with %v left, past the deadline", e.Kind, e.Margin))
			}
		}
	}
	lost := slices.IndexFunc(events, func(e health.Event) bool { return e.Kind == health.Lost })
	if lost < 0 {
		wrong = append(wrong, fmt.Errorf("healthrec: no Lost event: %v", Kinds(events)))
		return Warning{}, errors.Join(wrong...)
	}
	if lost != len(events)-1 {
		wrong = append(wrong, fmt.Errorf("healthrec: events after the loss: %v", Kinds(events[lost+1:])))
	}
	risk := -1
	for j := max(tr.From, 0); j < lost; j++ {
		if events[j].Kind == health.AtRisk {
			risk = j
			break
		}
	}
	if risk < 0 {
		wrong = append(wrong, fmt.Errorf("healthrec: lost via %v with no AtRisk before it: %v", events[lost].Via, Kinds(events[min(max(tr.From, 0), lost):])))
	}
	if err := errors.Join(wrong...); err != nil {
		return Warning{}, err
	}
	return Warning{Risk: risk, Lost: lost, Margin: events[risk].Margin}, nil
}

// Summary is what a set of trials tells of its warnings, for the log line
// of a test. The zero Summary has no trials.
type Summary struct {
	// Trials is how many trials ran; Margins holds, for each that warned,
	// the time left before the deadline when it warned.
	Trials  int
	Margins []time.Duration
}

// Warned returns how many trials warned.
func (s Summary) Warned() int { return len(s.Margins) }

// Median returns the median of the margins (the upper of the middle two),
// or 0 with none.
func (s Summary) Median() time.Duration {
	m := s.sorted()
	if len(m) == 0 {
		return 0
	}
	return m[len(m)/2]
}

// Least returns the least margin, or 0 with none.
func (s Summary) Least() time.Duration {
	m := s.sorted()
	if len(m) == 0 {
		return 0
	}
	return m[0]
}

func (s Summary) sorted() []time.Duration {
	m := slices.Clone(s.Margins)
	slices.Sort(m)
	return m
}

// String returns "AtRisk before the loss in W of N trials, M before the
// deadline (median; least L)".
func (s Summary) String() string {
	return fmt.Sprintf("AtRisk before the loss in %d of %d trials, %v before the deadline (median; least %v)", s.Warned(), s.Trials, s.Median(), s.Least())
}
