package k8slease

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		b    backoff
		want []time.Duration
	}{
		{"to 2 s", backoff{}, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms}},
		{"to 1 s", backoff{max: time.Second}, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.b
			for i, want := range tt.want {
				if got := b.pause(); got != want {
					t.Fatalf("pause %d = %v, want %v", i, got, want)
				}
			}
			b.reset()
			if got := b.pause(); got != 100*ms {
				t.Errorf("pause after reset = %v, want 100ms", got)
			}
		})
	}
}
