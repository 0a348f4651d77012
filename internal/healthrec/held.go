package healthrec

import (
	"errors"
	"fmt"

	"github.com/zukhruf/lease/health"
)

// Renewals checks the events of a lease granted, held and released: the
// Granted first, the Released last, and between them nothing but Renewed,
// RenewalFailed and AtRisk (a renewal made slow by a loaded machine). It
// returns the Renewed events, in order, for the issuer's test to check, or
// an error that joins each thing found wrong.
func Renewals(events []health.Event) ([]health.Event, error) {
	ks := Kinds(events)
	if len(ks) < 2 || ks[0] != health.Granted || ks[len(ks)-1] != health.Released {
		return nil, fmt.Errorf("healthrec: events = %v, want granted first and released last", ks)
	}
	var renewed []health.Event
	var wrong []error
	for _, e := range events[1 : len(events)-1] {
		switch e.Kind {
		case health.Renewed:
			renewed = append(renewed, e)
		case health.AtRisk, health.RenewalFailed:
		default:
			wrong = append(wrong, fmt.Errorf("healthrec: event %v between the grant and the release", e.Kind))
		}
	}
	if err := errors.Join(wrong...); err != nil {
		return nil, err
	}
	return renewed, nil
}
