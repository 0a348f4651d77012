// Package redisfence fences Redis keys: a script compares a write's
// fencing token with the highest one the key accepted and, in the same
// call, writes the key (SET, HSET, DEL) and raises its fence, or refuses
// the write with a *[fencing.StaleError].
//
// A key's fence is a string key beside it, named by [Fence.TokenKey]: the
// key's name and ":fence". On Redis Cluster give the key a hash tag
// ("{invoice-42}:rows"), so that both keys share a slot; a key without one
// fails with Redis's CROSSSLOT error.
//
// Lua numbers are doubles: a token above 2^53 would compare wrongly, and
// is refused with an error before it is sent.
package redisfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/fencing"
)

// MaxToken is the highest token a Fence takes: 2^53, the last integer a
// Lua number holds exactly.
const MaxToken = 1 << 53

// Fence writes keys of one Redis deployment under their fences. A Fence is
// safe for use by many goroutines at once; the zero Fence has no client and
// each call returns an error that says so.
type Fence struct {
	Client redis.Scripter // a *redis.Client, *redis.ClusterClient, *redis.Ring
}

// TokenKey returns the name of key's fence.
func (Fence) TokenKey(key string) string { return key + ":fence" }

// script compares ARGV[1] with the fence at KEYS[2]; if it is not lower, it
// raises the fence and runs the write that ARGV[2] names on KEYS[1]. It
// returns {1, token} when it wrote and {0, current} when it refused.
var script = redis.NewScript(`
local cur = redis.call('GET', KEYS[2])
if cur and tonumber(cur) > tonumber(ARGV[1]) then
	return {0, cur}
end
redis.call('SET', KEYS[2], ARGV[1])
local op = ARGV[2]
if op == 'set' then
	redis.call('SET', KEYS[1], ARGV[3])
elseif op == 'hset' then
	redis.call('HSET', KEYS[1], unpack(ARGV, 3))
elseif op == 'del' then
	redis.call('DEL', KEYS[1])
end
return {1, ARGV[1]}
`)

func (f Fence) run(ctx context.Context, key string, token int64, args ...any) error {
	if f.Client == nil {
		return errors.New("redisfence: Fence without a Client")
	}
	if key == "" {
		return errors.New("redisfence: empty key")
	}
	if token < -MaxToken || token > MaxToken {
		return fmt.Errorf("redisfence: token %d of %q is beyond ±2^53, which a Lua number cannot compare exactly", token, key)
	}
	res, err := script.Run(ctx, f.Client, []string{key, f.TokenKey(key)}, append([]any{token}, args...)...).Slice()
	if err != nil {
		return fmt.Errorf("redisfence: fenced write of %q: %w", key, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redisfence: fenced write of %q: the script returned %v", key, res)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		return nil
	}
	s, _ := res[1].(string)
	current, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("redisfence: the fence of %q holds %q, not a token", key, s)
	}
	return &fencing.StaleError{Resource: key, Token: token, Current: current}
}

// Set sets key to value if token is at least the highest token key
// accepted, and raises key's fence to token, in one call; otherwise it
// writes nothing and returns an error wrapping a *[fencing.StaleError]. An
// equal token passes.
func (f Fence) Set(ctx context.Context, key string, token int64, value string) error {
	return f.run(ctx, key, token, "set", value)
}

// HSet sets the fields of the hash at key as [Fence.Set] sets a value:
// values are field, value, field, value, ….
func (f Fence) HSet(ctx context.Context, key string, token int64, values ...string) error {
	if len(values) == 0 || len(values)%2 != 0 {
		return fmt.Errorf("redisfence: HSet of %q with %d values, want field-value pairs", key, len(values))
	}
	args := []any{"hset"}
	for _, v := range values {
		args = append(args, v)
	}
	return f.run(ctx, key, token, args...)
}

// Del deletes key under its fence, as [Fence.Set] writes it; the fence
// stays, so that an older holder cannot write the key again.
func (f Fence) Del(ctx context.Context, key string, token int64) error {
	return f.run(ctx, key, token, "del")
}

// Advance raises key's fence to token without a write, or returns an
// error wrapping a *[fencing.StaleError]: the call a new holder makes
// right after Lock, so that every older holder's write is refused from
// then on.
func (f Fence) Advance(ctx context.Context, key string, token int64) error {
	return f.run(ctx, key, token, "none")
}
