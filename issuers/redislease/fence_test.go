package redislease_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }

// fenceScript is a resource that refuses stale writes: it writes ARGV[2]
// into KEYS[1] only if the token ARGV[1] is at least the largest one it
// accepted (kept in KEYS[2]); it returns 1 if it wrote, 0 if it refused.
const fenceScript = `
local top = tonumber(redis.call('GET', KEYS[2]) or '0')
local t = tonumber(ARGV[1])
if t < top then return 0 end
redis.call('SET', KEYS[2], t)
redis.call('SET', KEYS[1], ARGV[2])
return 1
`

// fencedWrite writes value into resource with token, through the fence.
func fencedWrite(ctx context.Context, rdb redis.UniversalClient, resource string, token int64, value string) (bool, error) {
	n, err := rdb.Eval(ctx, fenceScript, []string{resource, resource + ":top"}, token, value).Int()
	return n == 1, err
}

// TestTokenRefusesStaleWrite: A is granted, its key deleted (A pauses
// before it could notice), B is granted; A's write with its token is
// refused, B's accepted. Tokens keep growing across deletions.
func TestTokenRefusesStaleWrite(t *testing.T) {
	t.Parallel() // its time is waits, not work: it runs beside the other waiting tests
	rdb := client(t, shared.Addr())
	key := keyName(t)
	resource := key + ":resource"
	var last int64
	for round := range 10 {
		a := mustLock(t, short, rdb, key)
		if a.Token() <= last {
			t.Fatalf("round %d: A's token %d, not above %d", round, a.Token(), last)
		}
		if ok, err := fencedWrite(t.Context(), rdb, resource, a.Token(), "a"); !ok || err != nil {
			t.Fatalf("A's write = %v, %v; want accepted", ok, err)
		}
		if err := rdb.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		b := mustLock(t, short, rdb, key)
		if b.Token() <= a.Token() {
			t.Fatalf("B's token %d, not above A's %d", b.Token(), a.Token())
		}
		if ok, err := fencedWrite(t.Context(), rdb, resource, b.Token(), "b"); !ok || err != nil {
			t.Fatalf("B's write = %v, %v; want accepted", ok, err)
		}
		if ok, err := fencedWrite(t.Context(), rdb, resource, a.Token(), "stale"); ok || err != nil {
			t.Fatalf("A's stale write = %v, %v; want refused", ok, err)
		}
		last = b.Token()
		a.Unlock(context.Background())
		b.Unlock(context.Background())
	}
}

// TestTokenCounterAheadOfTheClock: a counter ahead of the server's clock
// (counted on a server whose clock ran fast) goes on by one a grant.
func TestTokenCounterAheadOfTheClock(t *testing.T) {
	rdb := client(t, shared.Addr())
	key := keyName(t)
	ahead := time.Now().Add(24 * time.Hour).UnixMicro()
	if err := rdb.Set(t.Context(), "{"+key+"}:redislease-token", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range int64(3) {
		l := mustLock(t, short, rdb, key)
		if l.Token() != ahead+i+1 {
			t.Fatalf("grant %d: Token() = %d, want the counter plus one, %d", i, l.Token(), ahead+i+1)
		}
		l.Unlock(context.Background())
	}
}

// TestTokenGrowsAcrossErasedCounter: the token counter erased with the data
// (as FLUSHALL or a primary restarted without persistence erase it) starts
// again from the server's clock, above every token counted before; a stale
// write of the holder from before the erasure is still refused.
func TestTokenGrowsAcrossErasedCounter(t *testing.T) {
	t.Parallel() // its time is waits, not work: it runs beside the other waiting tests
	rdb := client(t, shared.Addr())
	key := keyName(t)
	resource := key + ":resource"
	var last int64
	for round := range 5 {
		a := mustLock(t, short, rdb, key)
		a2 := a.Token()
		a.Unlock(context.Background())
		a = mustLock(t, short, rdb, key) // a second grant on the same counter
		if a.Token() <= a2 {
			t.Fatalf("round %d: the next grant's token is %d, want more than %d", round, a.Token(), a2)
		}
		if a2 <= last {
			t.Fatalf("round %d: token %d after the counter was erased, not above %d", round, a2, last)
		}
		if ok, err := fencedWrite(t.Context(), rdb, resource, a.Token(), "a"); !ok || err != nil {
			t.Fatalf("A's write = %v, %v; want accepted", ok, err)
		}
		// Erase the key and its counter, and nothing else of the server's.
		n, err := rdb.Del(t.Context(), key, "{"+key+"}:redislease-token").Result()
		if err != nil || n != 2 {
			t.Fatalf("DEL of the key and its counter = %d, %v; want 2 keys deleted", n, err)
		}
		b := mustLock(t, short, rdb, key)
		if b.Token() <= a.Token() {
			t.Fatalf("round %d: B's token %d after the counter was erased, not above A's %d", round, b.Token(), a.Token())
		}
		if ok, err := fencedWrite(t.Context(), rdb, resource, b.Token(), "b"); !ok || err != nil {
			t.Fatalf("B's write = %v, %v; want accepted", ok, err)
		}
		if ok, err := fencedWrite(t.Context(), rdb, resource, a.Token(), "stale"); ok || err != nil {
			t.Fatalf("A's stale write = %v, %v; want refused", ok, err)
		}
		last = b.Token()
		a.Unlock(context.Background())
		b.Unlock(context.Background())
		rdb.Del(t.Context(), "{"+key+"}:redislease-token")
	}
}

// TestMutualExclusion: three holders take and release one key, a hundred
// rounds in all; no two hold it at once, and tokens grow with every grant.
func TestMutualExclusion(t *testing.T) {
	const holders, rounds = 3, 100
	key := keyName(t)
	var (
		inside  atomic.Int32
		grants  = make(chan int64, rounds+holders)
		left    = make(chan struct{}, rounds)
		errs    = make(chan error, holders)
		release = func(l interface{ Unlock(context.Context) error }) { l.Unlock(context.Background()) }
	)
	for range rounds {
		left <- struct{}{}
	}
	close(left)
	for range holders {
		go func() {
			rdb := client(t, shared.Addr())
			for range left {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				l, err := short.Lock(ctx, rdb, key)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) > 1 {
					errs <- errSecondHolder
					release(l)
					return
				}
				grants <- l.Token()
				if err := l.Signal().Err(); err != nil {
					errs <- err
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				release(l)
			}
			errs <- nil
		}()
	}
	for range holders {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(grants)
	var prev int64
	n := 0
	for tok := range grants {
		if tok <= prev {
			t.Errorf("grant %d: token %d, not above %d", n, tok, prev)
		}
		prev = tok
		n++
	}
	if n != rounds {
		t.Errorf("%d grants, want %d", n, rounds)
	}
}

var errSecondHolder = errorString("two holders at once")

type errorString string

func (e errorString) Error() string { return string(e) }
