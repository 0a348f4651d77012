package pglease

import (
	"crypto/sha256"
	"encoding/binary"
)

// KeySQL is the SQL expression that computes [Key] of the text parameter $1,
// for programs that take the same lock from another language:
//
//	SELECT pg_advisory_lock(('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint)
const KeySQL = `('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint`

// Key returns the advisory lock key of subject: the first eight bytes of the
// SHA-256 digest of subject's UTF-8 bytes, read as a big-endian two's
// complement int64. Every process, in any language, derives the same key
// ([KeySQL] computes it in SQL).
//
// Two subjects with the same key share one lock: their holders exclude each
// other, which is safe but may make one wait for the other. Among n subjects
// that happens with a probability of about n²/2⁶⁵.
func Key(subject string) int64 {
	sum := sha256.Sum256([]byte(subject))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}
