package k8slease

import (
	"testing"
	"time"
)

func TestNextRenewalStartsTheNextSecond(t *testing.T) {
	base := time.Date(2026, 12, 3, 10, 0, 7, 0, time.UTC)
	tests := []struct {
		name   string
		sent   time.Duration // past base
		period time.Duration
		want   time.Duration // past base
	}{
		{"a second, sent at the start", alignDelay, time.Second, time.Second + alignDelay},
		{"a second, sent late in its second", 900 * time.Millisecond, time.Second, time.Second + alignDelay},
		{"two and a half seconds", alignDelay, 2500 * time.Millisecond, 2*time.Second + alignDelay},
		{"within the second", 100 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond},
		{"across into the next second", 800 * time.Millisecond, 300 * time.Millisecond, time.Second + alignDelay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nextRenewal(base.Add(tt.sent), tt.period).Sub(base)
			if got != tt.want {
				t.Errorf("nextRenewal(+%v, %v) = +%v, want +%v", tt.sent, tt.period, got, tt.want)
			}
		})
	}
}

// TestDeadlineCountsFromTheStartOfTheSecond checks the rule that keeps the
// lease ahead of client-go's candidates: a renewal confirmed late in its
// second gives no more time than one sent at its start, and a renewal of
// the same second moves nothing.
func TestDeadlineCountsFromTheStartOfTheSecond(t *testing.T) {
	cfg, err := Config{LeaseDuration: 2 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	second := startOfSecond(now)
	var d deadline
	d.start(cfg, second.Add(900*time.Millisecond), func(error) {})
	defer d.stop()
	want := second.Add(2*time.Second - 200*time.Millisecond)
	if got := d.current(); !got.Equal(want) {
		t.Errorf("deadline of a write 900 ms into its second = second%+v, want second%+v", got.Sub(second), want.Sub(second))
	}
	d.confirm(second.Add(950 * time.Millisecond))
	if got := d.current(); !got.Equal(want) {
		t.Errorf("a renewal of the same second moved the deadline to second%+v, want second%+v", got.Sub(second), want.Sub(second))
	}
	d.confirm(second.Add(time.Second + alignDelay))
	if got, want := d.current(), want.Add(time.Second); !got.Equal(want) {
		t.Errorf("a renewal of the next second moved the deadline to second%+v, want second%+v", got.Sub(second), want.Sub(second))
	}
	d.confirm(second.Add(500 * time.Millisecond))
	if got, want := d.current(), want.Add(time.Second); !got.Equal(want) {
		t.Errorf("an older renewal confirmed late moved the deadline back to second%+v, want second%+v", got.Sub(second), want.Sub(second))
	}
}

// TestDeadlineLosesOnce checks that the timer loses the lease at the
// deadline, once, with ErrRenewalUnconfirmed, and that a stopped deadline
// loses nothing.
func TestDeadlineLosesOnce(t *testing.T) {
	cfg, err := Config{LeaseDuration: 2 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	losses := make(chan error, 2)
	var d deadline
	// A write sent 2 s ago: its deadline has passed.
	d.start(cfg, time.Now().Add(-2*time.Second), func(err error) { losses <- err })
	err = <-losses
	if !errorsIs(err, ErrRenewalUnconfirmed) {
		t.Errorf("loss = %v, want ErrRenewalUnconfirmed", err)
	}
	d.confirm(time.Now())
	d.expire()
	select {
	case err := <-losses:
		t.Errorf("a second loss: %v", err)
	default:
	}

	var s deadline
	s.start(cfg, time.Now().Add(-2*time.Second+time.Hour), func(err error) { losses <- err })
	s.stop()
	s.expire()
	select {
	case err := <-losses:
		t.Errorf("a stopped deadline lost the lease: %v", err)
	default:
	}
}
