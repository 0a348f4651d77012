package s3lease_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/issuers/s3lease"
)

// TestRenewalKeepsLease: a lease held for three TTLs is renewed and not
// lost, and its deadline moves.
func TestRenewalKeepsLease(t *testing.T) {
	c := client(t, shared.Addr())
	l := mustLock(t, short, c, keyName(t))
	first := l.Deadline()
	notLost(t, l, 3*short.TTL)
	if !l.Deadline().After(first) {
		t.Errorf("Deadline() = %v after three TTLs, want after the grant's %v", l.Deadline(), first)
	}
}

// TestOperatorDeleteLoses: an operator's delete of the lock object loses
// the holder with ErrDeleted at its next renewal; a Lock that was waiting
// is granted only after the expiry it read, after the holder's loss.
func TestOperatorDeleteLoses(t *testing.T) {
	ctx := t.Context()
	key := keyName(t)
	a := mustLock(t, short, client(t, shared.Addr()), key)
	b := lockAsync(ctx, short, client(t, shared.Addr()), key)
	time.Sleep(300 * time.Millisecond) // B reads A's record
	if err := client(t, shared.Addr()).RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	err := waitLost(t, a, 10*time.Second)
	if !errors.Is(err, s3lease.ErrDeleted) {
		t.Errorf("after the delete: Err() = %v, want ErrDeleted", err)
	}
	lostAt := time.Now()
	g := <-b
	if g.err != nil {
		t.Fatalf("B's Lock = %v", g.err)
	}
	defer g.l.Unlock(ctx)
	if g.at.Before(lostAt) {
		t.Errorf("B was granted %v before A's loss", lostAt.Sub(g.at))
	}
	if g.l.Token() <= a.Token() {
		t.Errorf("B's token %d, want above A's %d", g.l.Token(), a.Token())
	}
}

// TestOperatorOverwriteLoses: an operator's write of other bytes into the
// lock object loses the holder with ErrTakenOver at its next renewal; the
// object, not a record, is taken over a TTL after its write.
func TestOperatorOverwriteLoses(t *testing.T) {
	ctx := t.Context()
	key := keyName(t)
	c := client(t, shared.Addr())
	a := mustLock(t, short, c, key)
	body := []byte("maintenance")
	if _, err := c.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitLost(t, a, 10*time.Second); !errors.Is(err, s3lease.ErrTakenOver) {
		t.Errorf("after the overwrite: Err() = %v, want ErrTakenOver", err)
	}
	b := mustLock(t, short, client(t, shared.Addr()), key)
	if b.Token() <= a.Token() {
		t.Errorf("B's token %d, want above A's %d", b.Token(), a.Token())
	}
}

// TestTokens: a grant after a release, after a takeover of an expired
// object, and after an operator's delete, each has a larger token.
func TestTokens(t *testing.T) {
	ctx := t.Context()
	key := keyName(t)
	c := client(t, shared.Addr())
	a := mustLock(t, short, c, key)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustLock(t, short, c, key)
	if b.Token() != a.Token()+1 {
		t.Errorf("token after a release = %d, want %d", b.Token(), a.Token()+1)
	}
	if err := c.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLost(t, b, 10*time.Second)
	d := mustLock(t, short, c, key)
	if d.Token() <= b.Token() {
		t.Errorf("token after a delete = %d, want above %d", d.Token(), b.Token())
	}
}

// TestUnlockHandsOverAtOnce: a Lock of the same client waiting on the
// object is woken by the release, not by its poll: its RetryPeriod is a
// minute.
func TestUnlockHandsOverAtOnce(t *testing.T) {
	ctx := t.Context()
	key := keyName(t)
	c := client(t, shared.Addr())
	slow := short
	slow.RetryPeriod = time.Minute
	a := mustLock(t, slow, c, key)
	b := lockAsync(ctx, slow, c, key)
	time.Sleep(300 * time.Millisecond)
	a.Unlock(ctx)
	select {
	case g := <-b:
		if g.err != nil {
			t.Fatal(g.err)
		}
		g.l.Unlock(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting Lock of the same client was not granted within 30 s of the release")
	}
}

// TestMistakes: what cannot work fails Lock at once, whatever its context.
func TestMistakes(t *testing.T) {
	c := client(t, shared.Addr())
	for _, tc := range []struct {
		name    string
		cfg     s3lease.Config
		subject string
	}{
		{"no bucket", s3lease.Config{}, "orders"},
		{"empty key", s3lease.Config{}, "locks/"},
		{"missing bucket", s3lease.Config{Bucket: "no-such-bucket"}, "orders"},
		{"ttl too short", s3lease.Config{Bucket: bucket, TTL: time.Millisecond}, "orders"},
		{"skew too large", s3lease.Config{Bucket: bucket, TTL: 2 * time.Second, ClockSkew: time.Second}, "orders"},
		{"renew too slow", s3lease.Config{Bucket: bucket, TTL: 2 * time.Second, RenewPeriod: time.Second}, "orders"},
		{"key too long", s3lease.Config{Bucket: bucket}, string(bytes.Repeat([]byte("k"), 1025))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.cfg.Lock(context.Background(), c, tc.subject)
			if err == nil {
				l.Unlock(context.Background())
				t.Fatalf("Lock = %v, want an error", l)
			}
			t.Log(err)
		})
	}
	bad := s3lease.NewLocker(s3testClientWrongSecret(), short)
	if _, err := bad.Lock(context.Background(), "orders"); err == nil {
		t.Error("Lock with a wrong secret key succeeded")
	} else {
		t.Log(err)
	}
}

// TestManyLeasesShareGoroutines: 200 leases of one client are renewed by
// the session's scheduler and its renewers, not a goroutine each. Their
// TTL is 10 s: 80 renewals a second, which the renewers keep up with on
// versitygw under the race detector on a loaded machine.
func TestManyLeasesShareGoroutines(t *testing.T) {
	ctx := t.Context()
	c := client(t, shared.Addr())
	many := s3lease.Config{Bucket: bucket, TTL: 10 * time.Second}
	mustLock(t, many, c, keyName(t)) // the probe's and the client's first requests
	before := runtime.NumGoroutine()
	var ls []*s3lease.Lease
	for range 200 {
		l, err := many.Lock(ctx, c, keyName(t))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	notLost(t, ls[0], 4*time.Second) // every lease renewed once at least
	if n := runtime.NumGoroutine() - before; n > 40 {
		t.Errorf("200 leases added %d goroutines, want at most 40 (the renewers and the HTTP connections they use)", n)
	}
	for _, l := range ls {
		if err := l.Signal().Err(); err != nil {
			t.Errorf("lease lost with no fault: %v", err)
		}
		l.Unlock(ctx)
	}
}

// TestClockAhead: a waiter whose clock runs ahead of the holder's by the
// ClockSkew is granted only after the holder's loss; one ahead by three
// times the ClockSkew takes over while the holder is live, by about twice
// the ClockSkew less the Margin (the README's "The deadline"), and the
// fence refuses the holder's write after the waiter's.
func TestClockAhead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ahead   time.Duration
		overlap bool
	}{
		{"by the skew", short.TTL / 10, false},
		{"beyond it", 3 * short.TTL / 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			key := keyName(t)
			p := proxy(t, shared.Addr())
			a := mustLock(t, short, client(t, p.Addr()), key)
			fence := &fencing.Memory{}
			if err := fence.Advance(ctx, key, a.Token()); err != nil {
				t.Fatal(err)
			}
			b := lockAsync(ctx, s3lease.WithClockAhead(short, tc.ahead), client(t, shared.Addr()), key)
			p.Drop(faultnet.Both) // A renews no more
			<-a.Signal().Done()
			lostAt := time.Now()
			g := <-b
			if g.err != nil {
				t.Fatalf("B's Lock = %v", g.err)
			}
			defer g.l.Unlock(ctx)
			overlap := lostAt.Sub(g.at)
			t.Logf("B's clock ahead by %v: overlap %v", tc.ahead, overlap)
			if !tc.overlap {
				if overlap > 0 {
					t.Errorf("A was lost %v after B's grant, with B's clock ahead by the ClockSkew", overlap)
				}
				return
			}
			if overlap <= 0 {
				t.Logf("no overlap this time (%v): the machine's delays ate it", overlap)
			}
			if err := fence.Advance(ctx, key, g.l.Token()); err != nil {
				t.Fatalf("B's Advance = %v", err)
			}
			err := fence.Do(ctx, key, a.Token(), func(context.Context) error { return nil })
			if !errors.Is(err, fencing.ErrStale) {
				t.Errorf("A's fenced write after B's = %v, want ErrStale", err)
			}
		})
	}
}

func s3testClientWrongSecret() *minio.Client {
	c, _ := minio.New(shared.Addr(), &minio.Options{Creds: credentials.NewStaticV4(s3test.AccessKey, "wrong", ""), Region: "us-east-1"})
	return c
}

// proxy returns a faultnet proxy to addr, closed when the test ends.
func proxy(t testing.TB, addr string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestLateGrantNotReturned: a grant whose answer comes after its own
// deadline (the link delays each way by more than half the lease's life)
// is never returned as a live lease: Lock returns a lease only before its
// deadline, or an error.
func TestLateGrantNotReturned(t *testing.T) {
	p := proxy(t, shared.Addr())
	c := client(t, p.Addr())
	first := mustLock(t, short, c, keyName(t)) // the session's probe, on a quick link
	defer first.Unlock(t.Context())
	p.Delay(short.TTL / 2)
	ctx, cancel := context.WithTimeout(t.Context(), 4*short.TTL)
	defer cancel()
	l, err := short.Lock(ctx, c, keyName(t))
	returned := time.Now()
	if err != nil {
		return
	}
	defer l.Unlock(context.Background())
	if !l.Deadline().After(returned) {
		t.Errorf("Lock returned a lease whose deadline %v had passed at its return %v; Err() = %v",
			l.Deadline().Format(time.StampMilli), returned.Format(time.StampMilli), l.Signal().Err())
	}
}
