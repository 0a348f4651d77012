package redislease

import (
	"bufio"
	"strings"
	"testing"
)

// TestReadValueRefusesHostileLengths feeds readValue the replies a broken or
// hostile server could send: each must be an error that fails the
// connection, never a panic or an allocation as large as the server says,
// both of which would end the process from the connection's reader.
func TestReadValueRefusesHostileLengths(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"bulk length overflowing int", "$9223372036854775807\r\n"},
		{"bulk length beyond proto-max-bulk-len", "$1099511627776\r\n"},
		{"blob error length overflowing int", "!9223372036854775807\r\n"},
		{"array length beyond memory", "*1099511627776\r\n"},
		{"map length overflowing int when doubled", "%4611686018427387904\r\n"},
		{"push length beyond memory", ">1099511627776\r\n"},
		{"nesting deeper than any reply", strings.Repeat("*1\r\n", 100000) + ":1\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, _, err := readValue(bufio.NewReader(strings.NewReader(tt.in)))
			if err == nil {
				t.Fatalf("readValue(%.20q…) = %v, nil, want an error", tt.in, v)
			}
		})
	}
}

// TestReadValueReadsReplies pins the replies the lease reads, so that the
// limits above refuse nothing a server sends.
func TestReadValueReadsReplies(t *testing.T) {
	tests := []struct {
		name, in string
		push     bool
	}{
		{"simple string", "+OK\r\n", false},
		{"bulk", "$3\r\nabc\r\n", false},
		{"null bulk", "$-1\r\n", false},
		{"ROLE of a primary", "*3\r\n$6\r\nmaster\r\n:10\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n$2\r\n10\r\n", false},
		{"HELLO map", "%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$4\r\nrole\r\n$6\r\nmaster\r\n", false},
		{"invalidate push", ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", true},
		{"invalidate push of a flush", ">2\r\n$10\r\ninvalidate\r\n_\r\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, push, err := readValue(bufio.NewReader(strings.NewReader(tt.in)))
			if err != nil || push != tt.push {
				t.Fatalf("readValue(%q) = _, %v, %v, want _, %v, nil", tt.in, push, err, tt.push)
			}
		})
	}
}
