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
		{"2 s", Config{LeaseDuration: 2 * time.Second}, Config{LeaseDuration: 2 * time.Second, RenewPeriod: time.Second, Margin: 200 * time.Millisecond, RetryPeriod: time.Second}},
		{"set fields kept", Config{LeaseDuration: 4 * time.Second, Margin: time.Second}, Config{LeaseDuration: 4 * time.Second, RenewPeriod: time.Second, Margin: time.Second, RetryPeriod: time.Second}},
		{"an hour", Config{LeaseDuration: time.Hour}, Config{LeaseDuration: time.Hour, RenewPeriod: 10 * time.Minute, Margin: 6 * time.Minute, RetryPeriod: 10 * time.Minute}},
		{"floors", Config{LeaseDuration: 2 * time.Second, RenewPeriod: time.Second, Margin: 12 * time.Millisecond, RetryPeriod: time.Second}, Config{LeaseDuration: 2 * time.Second, RenewPeriod: time.Second, Margin: 12 * time.Millisecond, RetryPeriod: time.Second}},
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
		{"over an hour", Config{LeaseDuration: time.Hour + time.Second}, "longer than 1h0m0s"},
		// 2^32+15 s: written as 15 s by an int32 conversion.
		{"int32 wrap", Config{LeaseDuration: (1<<32 + 15) * time.Second}, "longer than 1h0m0s"},
		{"2^31 s", Config{LeaseDuration: (1 << 31) * time.Second}, "longer than 1h0m0s"},
		{"renew period 1 ms", Config{RenewPeriod: time.Millisecond}, "renew period 1ms is shorter than 1s"},
		{"negative renew period", Config{RenewPeriod: -time.Second}, "shorter than 1s"},
		{"retry period 1 ns", Config{RetryPeriod: time.Nanosecond}, "retry period 1ns is shorter than 1s"},
		{"retry period over the lease", Config{RetryPeriod: 16 * time.Second}, "longer than the lease duration"},
		{"margin 1 ns", Config{Margin: time.Nanosecond}, "margin 1ns is shorter than 25ms"},
		{"margin under the floor", Config{LeaseDuration: 2 * time.Second, Margin: 11 * time.Millisecond}, "shorter than 12ms"},
		{"negative margin", Config{Margin: -1}, "shorter than 25ms"},
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
