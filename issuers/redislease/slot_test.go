package redislease

import "testing"

// TestSlotOf checks slotOf against the slots Redis Cluster gives (CLUSTER
// KEYSLOT), hash tags included.
func TestSlotOf(t *testing.T) {
	for _, tc := range []struct {
		key  string
		slot int
	}{
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363},
		{"foo{{bar}}zap", 4015},
		{"foo{bar}{zap}", 5061},
		{"", 0},
	} {
		if got := slotOf(tc.key); got != tc.slot {
			t.Errorf("slotOf(%q) = %d, want %d", tc.key, got, tc.slot)
		}
	}
}
