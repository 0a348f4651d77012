package redislease

import "strings"

// slotOf returns the Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key if it has none, modulo 16384, as Redis Cluster
// computes it. A session on a Cluster node sends one script call a slot: a
// script's keys must share one.
func slotOf(key string) int {
	if hasHashTag(key) {
		i := strings.IndexByte(key, '{')
		j := strings.IndexByte(key[i+1:], '}')
		key = key[i+1 : i+1+j]
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
