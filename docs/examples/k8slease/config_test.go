package k8slease

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want Config
	}{
		{"zero: client-go's 15 s", Config{}, Config{LeaseDuration: 15 * time.Second, RenewPeriod: 2500 * time.Millisecond, Margin: 1500 * time.Millisecond, RetryPeriod: 2500 * time.Millisecond}},
		{"2 s", Config{LeaseDuration: 2 * time.Second}, Config{LeaseDuration: 2 * time.Second, RenewPeriod: time.Second, Margin: 200 * time.Millisecond, RetryPeriod: 333333333}},
		{"set fields kept", Config{LeaseDuration: 4 * time.Second, Margin: time.Second}, Config{LeaseDuration: 4 * time.Second, RenewPeriod: time.Second, Margin: time.Second, RetryPeriod: 666666666}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.withDefaults()
			if err != nil || got != tt.want {
				t.Errorf("%+v.withDefaults() = %+v, %v; want %+v, nil", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestConfigRefused(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want string
	}{
		{"under 2 s", Config{LeaseDuration: 1999 * time.Millisecond}, "shorter than 2s"},
		{"negative", Config{LeaseDuration: -time.Second}, "shorter than 2s"},
		{"margin leaves no round trip", Config{LeaseDuration: 2 * time.Second, Margin: 600 * time.Millisecond}, "less than a quarter"},
		{"renew period too long", Config{LeaseDuration: 4 * time.Second, RenewPeriod: 3 * time.Second}, "less than a quarter"},
		{"negative margin", Config{Margin: -1}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.in.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%+v.withDefaults() error = %v, want one saying %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestDurationSecondsRoundsUp(t *testing.T) {
	for d, want := range map[time.Duration]int32{2 * time.Second: 2, 2500 * time.Millisecond: 3, 15 * time.Second: 15} {
		if got := (Config{LeaseDuration: d}).durationSeconds(); got != want {
			t.Errorf("durationSeconds of %v = %d, want %d", d, got, want)
		}
	}
}
