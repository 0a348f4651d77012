package pglease

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// KeySQL is the SQL expression that computes [Key] of the bytea parameter
// $1, the subject's bytes, for programs that take the same lock from another
// language:
//
//	SELECT pg_advisory_lock(('x' || left(encode(sha256($1::bytea), 'hex'), 16))::bit(64)::bigint)
//
// The subject is passed as bytea, not text, so that every subject [Key]
// accepts has its key in SQL too, among them those that are not valid UTF-8
// or hold a NUL byte, which a text parameter refuses. A Go program passes
// []byte(subject).
const KeySQL = `('x' || left(encode(sha256($1::bytea), 'hex'), 16))::bit(64)::bigint`

// KeyedSQL is the SQL expression that computes the key of the bytea
// parameter $1, the subject's bytes, under the secret $2 (bytea), as
// [Config.Key] does when [Config.Secret] is set. It needs the pgcrypto
// extension (CREATE EXTENSION pgcrypto), whose hmac computes HMAC-SHA-256.
const KeyedSQL = `('x' || left(encode(hmac($1::bytea, $2::bytea, 'sha256'), 'hex'), 16))::bit(64)::bigint`

// Key returns the advisory lock key of subject: the first eight bytes of the
// SHA-256 digest of subject's bytes, read as a big-endian two's complement
// int64. Every process, in any language, derives the same key ([KeySQL]
// computes it in SQL). Key is [Config.Key] of a Config without a secret.
//
// A key has 64 bits: two subjects with the same key share one lock, and
// their holders exclude each other, which is safe but may make one wait for
// the other. Among n subjects that happens with a probability of about
// n²/2⁶⁵, and anyone can search for such a pair: one was found with a
// single core in minutes ("subj-66f0332ec10e249a" and
// "subj-cbf1f9e95cb1a442" share a key). A deployment that takes subjects
// from its users, who could then make one user's lock block another's, sets
// [Config.Secret].
func Key(subject string) int64 {
	sum := sha256.Sum256([]byte(subject))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// Key returns the advisory lock key of subject under c: [Key](subject) if
// c.Secret is empty, and otherwise the first eight bytes of the
// HMAC-SHA-256 of subject's bytes under c.Secret, read as [Key] reads the
// digest ([KeyedSQL] computes it in SQL). Without the secret, a pair of
// subjects that share a key under it can be found only by chance.
func (c Config) Key(subject string) int64 {
	if len(c.Secret) == 0 {
		return Key(subject)
	}
	m := hmac.New(sha256.New, c.Secret)
	m.Write([]byte(subject))
	return int64(binary.BigEndian.Uint64(m.Sum(nil)[:8]))
}
