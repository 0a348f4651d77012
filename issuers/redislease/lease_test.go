package redislease_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/lost"
)

func TestLockWritesKeyAndToken(t *testing.T) {
	rdb := client(t, shared.Addr())
	key := keyName(t)
	l := mustLock(t, short, rdb, key)
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("Err() = %v, want nil", err)
	}
	v, err := rdb.Get(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The first grant of a key starts its counter at the server's clock in
	// microseconds.
	tm, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if now := tm.UnixMicro(); l.Token() <= 0 || l.Token() > now || now-l.Token() > time.Minute.Microseconds() {
		t.Errorf("Token() = %d, want the server's clock in microseconds when it granted the key, a little before %d", l.Token(), now)
	}
	if want := ":" + strconv.FormatInt(l.Token(), 10); !strings.HasSuffix(v, want) {
		t.Errorf("the key holds %q, want a value ending in the token %s", v, want)
	}
	counter, err := rdb.Get(t.Context(), "{"+key+"}:redislease-token").Int64()
	if err != nil || counter != l.Token() {
		t.Errorf("the token counter = %d, %v; want Token() %d", counter, err, l.Token())
	}
	ttl, err := rdb.PTTL(t.Context(), key).Result()
	if err != nil || ttl <= 0 || ttl > short.TTL {
		t.Errorf("PTTL = %v, %v; want in (0, %v]", ttl, err, short.TTL)
	}
	if got := l.Signal().String(); !strings.Contains(got, key) {
		t.Errorf("Signal().String() = %q, want the subject %s", got, key)
	}
}

// TestRenewalsKeepTheLease holds a 2 s lease for three TTLs while another
// Lock waits: without renewals the key would expire.
func TestRenewalsKeepTheLease(t *testing.T) {
	key := keyName(t)
	a := mustLock(t, short, client(t, shared.Addr()), key)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
	defer cancel()
	b := lockAsync(ctx, short, client(t, shared.Addr()), key)
	select {
	case g := <-b:
		if g.err == nil {
			g.l.Unlock(context.Background())
		}
		if !errors.Is(g.err, context.DeadlineExceeded) {
			t.Fatalf("B's Lock = %v, want the deadline of its context", g.err)
		}
	case <-a.Signal().Done():
		t.Fatalf("A was lost: %v", a.Signal().Err())
	}
	if err := a.Signal().Err(); err != nil {
		t.Fatalf("A.Err() = %v, want nil", err)
	}
}

// TestUnlockHandsOver releases the key to a waiting Lock, again and again,
// and checks that the waiting Lock is woken by the release: it tracks the
// key. Its retry period and the TTL are 10 s, so a waiter that slept until
// either would wait seconds (at least the TTL less a renew period, 6.7 s);
// a woken one waits milliseconds, which the test logs, and must wait less
// than 2 s, whatever the machine's load.
func TestUnlockHandsOver(t *testing.T) {
	key := keyName(t)
	rdb := client(t, shared.Addr())
	slow := redislease.Config{TTL: 10 * time.Second, RetryPeriod: 10 * time.Second}
	var waits []time.Duration
	tokens := []int64{}
	l := mustLock(t, slow, rdb, key)
	tokens = append(tokens, l.Token())
	for range 20 {
		b := lockAsync(t.Context(), slow, client(t, shared.Addr()), key)
		time.Sleep(50 * time.Millisecond) // B waits
		start := time.Now()
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("after Unlock, Err() = %v, want nil", err)
		}
		g := <-b
		if g.err != nil {
			t.Fatal(g.err)
		}
		waits = append(waits, g.at.Sub(start))
		l = g.l
		tokens = append(tokens, l.Token())
	}
	l.Unlock(context.Background())
	slices.Sort(waits)
	median := waits[len(waits)/2]
	t.Logf("Unlock → waiting Lock granted: median %v, max %v over %d hand-overs", median, waits[len(waits)-1], len(waits))
	if longest := waits[len(waits)-1]; longest >= 2*time.Second {
		t.Errorf("a hand-over took %v: the waiting Lock was not woken by the release", longest)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens %v: not strictly increasing at %d", tokens, i)
		}
	}
}

// TestOperatorWrites: a key deleted, overwritten, flushed or whose expiry
// is shortened by another client loses the lease at once, with its cause:
// by the push, whose read the loss names, within 3 s of the write however
// loaded the machine. The lease renews every 4.5 s (a 10 s TTL), about
// 4.4 s after the write: one that learned only at its next renewal would
// name the renewal, and be lost later than that.
func TestOperatorWrites(t *testing.T) {
	slow := redislease.Config{TTL: 10 * time.Second, RenewPeriod: 4500 * time.Millisecond}
	cases := []struct {
		name  string
		cause error
		do    func(t *testing.T, key string) error
	}{
		{"DEL", redislease.ErrDeleted, func(t *testing.T, key string) error {
			return client(t, shared.Addr()).Del(t.Context(), key).Err()
		}},
		{"UNLINK", redislease.ErrDeleted, func(t *testing.T, key string) error {
			return client(t, shared.Addr()).Unlink(t.Context(), key).Err()
		}},
		{"SET", redislease.ErrTakenOver, func(t *testing.T, key string) error {
			return client(t, shared.Addr()).Set(t.Context(), key, "operator", 0).Err()
		}},
		// An expiry shorter than the margin (1 s, a tenth of the TTL): the
		// lease is lost at once, not at the expiry less the margin. The push's
		// read must find the key before it expires, or the cause is
		// ErrDeleted: 800 ms, 200 ms under the margin, leaves it that long.
		{"PEXPIRE 800 ms", redislease.ErrExpired, func(t *testing.T, key string) error {
			return client(t, shared.Addr()).PExpire(t.Context(), key, 800*time.Millisecond).Err()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var most time.Duration
			for range *faultTrials {
				key := keyName(t)
				l := mustLock(t, slow, client(t, shared.Addr()), key)
				time.Sleep(100 * time.Millisecond)
				if err := tc.do(t, key); err != nil {
					t.Fatal(err)
				}
				wrote := time.Now()
				err := waitLost(t, l, slow.TTL)
				took := time.Since(wrote)
				var le *lost.Error
				if !errors.As(err, &le) || !errors.Is(err, tc.cause) {
					t.Fatalf("Err() = %v, want a *lost.Error wrapping %v", err, tc.cause)
				}
				if !strings.Contains(err.Error(), "the read after an invalidation of the key") {
					t.Errorf("Err() = %v, want a loss by the read after the push: the push was missed", err)
				}
				if took >= 3*time.Second {
					t.Errorf("lost %v after the write, want less than 3 s: the push was not acted on at once: %v", took, err)
				}
				most = max(most, took)
			}
			t.Logf("%d trials: lost at most %v after the write returned", *faultTrials, most)
		})
	}
}

// TestDeletedKeyWaitsForTheClaim deletes a held key with DEL while its
// holder hears nothing from Redis (its link silent both ways): a waiting
// Lock is granted only once the holder is lost, for the key's claim keeps
// its expiry. Without the claim, the waiter was granted within
// milliseconds of the deletion, while the holder was live until its
// deadline.
func TestDeletedKeyWaitsForTheClaim(t *testing.T) {
	for try := range *faultTrials {
		p, err := faultnet.Listen(shared.Addr())
		if err != nil {
			t.Fatal(err)
		}
		key := keyName(t)
		a := mustLock(t, short, client(t, p.Addr()), key)
		ctx, cancel := context.WithTimeout(t.Context(), 5*short.TTL)
		waiting := lockAsync(ctx, short, client(t, shared.Addr()), key)
		time.Sleep(200 * time.Millisecond) // B waits
		p.Drop(faultnet.Both)
		if err := client(t, shared.Addr()).Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		g := <-waiting
		cancel()
		if g.err != nil {
			t.Fatalf("try %d: B's Lock = %v", try, g.err)
		}
		if err := a.Signal().Err(); err == nil {
			t.Errorf("try %d: B was granted %v after the deletion, while A was live", try, g.at.Sub(deleted))
		}
		g.l.Unlock(context.Background())
		p.Close()
	}
}
