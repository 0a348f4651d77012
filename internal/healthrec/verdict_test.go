package healthrec_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/healthrec"
)

func ev(k health.Kind, margin time.Duration) health.Event {
	return health.Event{Kind: k, Margin: margin, Via: health.Deadline}
}

var (
	granted = ev(health.Granted, 0)
	renewed = ev(health.Renewed, time.Second)
	lostEv  = ev(health.Lost, 0)
)

// TestAtRiskBeforeLoss: each history is judged right or wrong, and each
// wrong one says what was wrong.
func TestAtRiskBeforeLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []health.Event
		trial  healthrec.Trial
		want   healthrec.Warning
		wrong  []string // what the error says; none when the history is right
	}{
		{
			name:   "warned",
			events: []health.Event{granted, renewed, ev(health.AtRisk, 300*time.Millisecond), ev(health.AtRisk, 100*time.Millisecond), lostEv},
			want:   healthrec.Warning{Risk: 2, Lost: 4, Margin: 300 * time.Millisecond},
		},
		{
			name:   "warned after a failure",
			events: []health.Event{granted, ev(health.RenewalFailed, 200*time.Millisecond), ev(health.AtRisk, 200*time.Millisecond), lostEv},
			trial:  healthrec.Trial{TimeLeft: true},
			want:   healthrec.Warning{Risk: 2, Lost: 3, Margin: 200 * time.Millisecond},
		},
		{
			name:   "no warning",
			events: []health.Event{granted, renewed, lostEv},
			wrong:  []string{"lost via deadline with no AtRisk before it: [granted renewed lost]"},
		},
		{
			name:   "warned only after the loss",
			events: []health.Event{granted, lostEv, ev(health.AtRisk, time.Millisecond)},
			wrong:  []string{"events after the loss: [at_risk]", "no AtRisk before it"},
		},
		{
			name:   "an event after the loss",
			events: []health.Event{granted, ev(health.AtRisk, time.Millisecond), lostEv, renewed},
			wrong:  []string{"events after the loss: [renewed]"},
		},
		{
			name:   "two losses",
			events: []health.Event{granted, ev(health.AtRisk, time.Millisecond), lostEv, lostEv},
			wrong:  []string{"events after the loss: [lost]"},
		},
		{
			name:   "no loss",
			events: []health.Event{granted, ev(health.AtRisk, time.Millisecond)},
			wrong:  []string{"no Lost event: [granted at_risk]"},
		},
		{
			name:   "no events",
			events: nil,
			wrong:  []string{"no Lost event"},
		},
		{
			name:   "warned before the fault only",
			events: []health.Event{granted, ev(health.AtRisk, time.Millisecond), renewed, renewed, lostEv},
			trial:  healthrec.Trial{From: 3},
			wrong:  []string{"no AtRisk before it: [renewed lost]"},
		},
		{
			name:   "warned after the fault",
			events: []health.Event{granted, ev(health.AtRisk, time.Millisecond), renewed, ev(health.AtRisk, 400*time.Millisecond), lostEv},
			trial:  healthrec.Trial{From: 2},
			want:   healthrec.Warning{Risk: 3, Lost: 4, Margin: 400 * time.Millisecond},
		},
		{
			name:   "a failure with no time left",
			events: []health.Event{granted, ev(health.AtRisk, time.Millisecond), ev(health.RenewalFailed, 0), lostEv},
			trial:  healthrec.Trial{TimeLeft: true},
			wrong:  []string{"renewal_failed with 0s left, past the deadline"},
		},
		{
			name:   "a warning past the deadline",
			events: []health.Event{granted, ev(health.AtRisk, -time.Millisecond), lostEv},
			trial:  healthrec.Trial{TimeLeft: true},
			wrong:  []string{"at_risk with -1ms left, past the deadline"},
		},
		{
			name:   "no time left, unchecked",
			events: []health.Event{granted, ev(health.AtRisk, -time.Millisecond), lostEv},
			want:   healthrec.Warning{Risk: 1, Lost: 2, Margin: -time.Millisecond},
		},
		{
			name:   "everything wrong",
			events: []health.Event{granted, ev(health.RenewalFailed, -time.Millisecond), lostEv, renewed},
			trial:  healthrec.Trial{TimeLeft: true},
			wrong:  []string{"renewal_failed with -1ms left", "events after the loss: [renewed]", "no AtRisk before it"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := healthrec.AtRiskBeforeLoss(tc.events, tc.trial)
			if tc.wrong == nil {
				if err != nil || w != tc.want {
					t.Errorf("AtRiskBeforeLoss = %+v, %v; want %+v, nil", w, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("AtRiskBeforeLoss = %+v, nil; want an error saying %q", w, tc.wrong)
			}
			if w != (healthrec.Warning{}) {
				t.Errorf("AtRiskBeforeLoss = %+v with an error, want no warning", w)
			}
			for _, s := range tc.wrong {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("AtRiskBeforeLoss error = %q, want it to say %q", err, s)
				}
			}
			if !strings.HasPrefix(err.Error(), "healthrec: ") {
				t.Errorf("AtRiskBeforeLoss error = %q, want it to start with the package's name", err)
			}
		})
	}
}

// TestAtRiskBeforeLossNegativeFrom: a From below zero reads every event.
func TestAtRiskBeforeLossNegativeFrom(t *testing.T) {
	w, err := healthrec.AtRiskBeforeLoss([]health.Event{ev(health.AtRisk, time.Second), lostEv}, healthrec.Trial{From: -1})
	if err != nil || w.Risk != 0 {
		t.Errorf("AtRiskBeforeLoss(From -1) = %+v, %v; want the warning at 0", w, err)
	}
}

// TestSummary: the median is the upper middle margin of the sorted ones,
// the least the first; a zero Summary reports zeros.
func TestSummary(t *testing.T) {
	var zero healthrec.Summary
	if zero.Warned() != 0 || zero.Median() != 0 || zero.Least() != 0 {
		t.Errorf("zero Summary = %d warned, median %v, least %v; want zeros", zero.Warned(), zero.Median(), zero.Least())
	}
	s := healthrec.Summary{Trials: 5, Margins: []time.Duration{400 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond}}
	if s.Warned() != 4 || s.Median() != 300*time.Millisecond || s.Least() != 100*time.Millisecond {
		t.Errorf("Summary = %d warned, median %v, least %v; want 4, 300ms, 100ms", s.Warned(), s.Median(), s.Least())
	}
	if s.Margins[0] != 400*time.Millisecond {
		t.Errorf("Median sorted the Summary's margins: %v", s.Margins)
	}
	if got, want := s.String(), "AtRisk before the loss in 4 of 5 trials, 300ms before the deadline (median; least 100ms)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestAtRiskBeforeLossErrorJoined: the error joins one error per thing
// wrong, so a test may report each.
func TestAtRiskBeforeLossErrorJoined(t *testing.T) {
	_, err := healthrec.AtRiskBeforeLoss([]health.Event{ev(health.RenewalFailed, 0), lostEv, renewed}, healthrec.Trial{TimeLeft: true})
	var j interface{ Unwrap() []error }
	if !errors.As(err, &j) || len(j.Unwrap()) != 3 {
		t.Errorf("error = %v, want three joined", err)
	}
}

func ExampleAtRiskBeforeLoss() {
	events := []health.Event{
		{Kind: health.Granted},
		{Kind: health.Renewed, Margin: 600 * time.Millisecond},
		{Kind: health.AtRisk, Margin: 550 * time.Millisecond, Err: health.ErrUnconfirmed},
		{Kind: health.Lost, Via: health.Deadline},
	}
	var s healthrec.Summary
	s.Trials++
	w, err := healthrec.AtRiskBeforeLoss(events, healthrec.Trial{TimeLeft: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Margins = append(s.Margins, w.Margin)
	fmt.Println(s)

	_, err = healthrec.AtRiskBeforeLoss(events[:2], healthrec.Trial{})
	fmt.Println(err)
	// Output:
	// AtRisk before the loss in 1 of 1 trials, 550ms before the deadline (median; least 550ms)
	// healthrec: no Lost event: [granted renewed]
}

// TestRenewals: a lease granted, held and released has its Renewed events
// returned; each history that is not one is caught.
func TestRenewals(t *testing.T) {
	released := ev(health.Released, 0)
	r2 := health.Event{Kind: health.Renewed, Token: 2}
	for _, tc := range []struct {
		name   string
		events []health.Event
		want   []health.Event
		wrong  string
	}{
		{"held", []health.Event{granted, renewed, ev(health.RenewalFailed, time.Second), ev(health.AtRisk, time.Second), r2, released}, []health.Event{renewed, r2}, ""},
		{"no renewal", []health.Event{granted, released}, nil, ""},
		{"not granted first", []health.Event{renewed, released}, nil, "want granted first and released last"},
		{"not released last", []health.Event{granted, renewed}, nil, "want granted first and released last"},
		{"lost before the release", []health.Event{granted, lostEv, released}, nil, "event lost between the grant and the release"},
		{"granted twice", []health.Event{granted, granted, released}, nil, "event granted between the grant and the release"},
		{"one event", []health.Event{granted}, nil, "want granted first and released last"},
		{"none", nil, nil, "want granted first and released last"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := healthrec.Renewals(tc.events)
			if tc.wrong == "" {
				if err != nil || len(got) != len(tc.want) {
					t.Fatalf("Renewals = %v, %v; want %v, nil", got, err, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Errorf("Renewals[%d] = %+v, want %+v", i, got[i], tc.want[i])
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wrong) {
				t.Errorf("Renewals = %v, %v; want an error saying %q", got, err, tc.wrong)
			}
		})
	}
}
