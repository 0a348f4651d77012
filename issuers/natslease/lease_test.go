package natslease_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/natslease"
	"github.com/zukhruf/lease/issuers/natslease/internal/natstest"
	"github.com/zukhruf/lease/lost"
)

// lastTTL returns the Nats-TTL header of the last message of key in the
// bucket "leases", read from the stream on the server.
func lastTTL(t *testing.T, nc *nats.Conn, key string) (ttl string, seq uint64) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+natslease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "$KV."+natslease.DefaultBucket+"."+key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Header.Get(jetstream.MsgTTLHeader), m.Sequence
}

// TestUpdateDropsTTL shows, on the server, what nats.go#1994 reports: the
// KV Update after a Create with a per-key TTL writes a message without
// one, so the key never expires. The hand-written pattern this issuer's
// peer follows has that flaw.
func TestUpdateDropsTTL(t *testing.T) {
	nc := client(t, shared.URL(natstest.App))
	kv := bucket(t, nc, natslease.DefaultBucket)
	ctx := t.Context()
	key := keyName(t)
	rev, err := kv.Create(ctx, key, []byte("a"), jetstream.KeyTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if ttl, _ := lastTTL(t, nc, key); ttl == "" {
		t.Fatalf("the Create's message has no Nats-TTL header")
	}
	if _, err := kv.Update(ctx, key, []byte("a"), rev); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := lastTTL(t, nc, key); ttl != "" {
		t.Fatalf("the Update's message has Nats-TTL %q; nats.go#1994 is fixed: the peer's column no longer shows it", ttl)
	}
	// Three times the Create's TTL later, the key is still there: the
	// server expires it no more.
	time.Sleep(3 * time.Second)
	if _, err := kv.Get(ctx, key); err != nil {
		t.Fatalf("Get after the Update and three TTLs = %v, want the key still there", err)
	}
	kv.Purge(ctx, key)
}

// TestRenewalKeepsTTL: each renewal of a lease writes the key with the
// lease's TTL, as the server stores it.
func TestRenewalKeepsTTL(t *testing.T) {
	nc := client(t, shared.URL(natstest.App))
	key := keyName(t)
	l := mustLock(t, short, nc, key)
	for {
		ttl, seq := lastTTL(t, nc, key)
		if ttl != short.TTL.String() {
			t.Fatalf("revision %d of the key has Nats-TTL %q, want %q", seq, ttl, short.TTL.String())
		}
		if seq > uint64(l.Token()) {
			break // a renewal's, checked
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRenewedKeyExpires: a key renewed at least once expires on the server
// when its holder falls silent, so a waiting Lock is granted; the holder
// was lost before.
func TestRenewedKeyExpires(t *testing.T) {
	p, err := faultnet.Listen(shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	viaProxy := client(t, "nats://app:app@"+p.Addr())
	direct := client(t, shared.URL(natstest.App))
	key := keyName(t)
	a := mustLock(t, short, viaProxy, key)
	kv := bucket(t, direct, natslease.DefaultBucket)
	for {
		e, err := kv.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if e.Revision() > uint64(a.Token()) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Drop(faultnet.Both)
	defer p.Heal()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b := <-lockAsync(ctx, short, direct, key)
	if b.err != nil {
		t.Fatalf("B's Lock after A fell silent = %v", b.err)
	}
	defer b.l.Unlock(context.Background())
	select {
	case <-a.Signal().Done():
	default:
		t.Fatal("B was granted while A was live")
	}
	if !errors.Is(a.Signal().Err(), natslease.ErrRenewalUnconfirmed) {
		t.Errorf("A's Err() = %v, want ErrRenewalUnconfirmed", a.Signal().Err())
	}
	if b.l.Token() <= a.Token() {
		t.Errorf("B's Token() = %d, want above A's %d", b.l.Token(), a.Token())
	}
}

// TestTokenGrowsAcrossDeletion: the tokens of successive holders grow
// across a release, an operator's delete and purge, and an expiry.
func TestTokenGrowsAcrossDeletion(t *testing.T) {
	nc := client(t, shared.URL(natstest.App))
	op := bucket(t, client(t, shared.URL(natstest.App)), natslease.DefaultBucket)
	ctx := t.Context()
	key := keyName(t)
	var last int64
	next := func(what string) *natslease.Lease {
		t.Helper()
		l, err := short.Lock(ctx, nc, key)
		if err != nil {
			t.Fatalf("Lock after %s = %v", what, err)
		}
		if l.Token() <= last {
			t.Errorf("Token() after %s = %d, want above %d", what, l.Token(), last)
		}
		last = l.Token()
		return l
	}
	l := next("nothing")
	l.Unlock(ctx)
	l = next("a release")
	if err := op.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	waitLost(t, l, lossWithin)
	l.Unlock(ctx)
	l = next("an operator's delete")
	if err := op.Purge(ctx, key); err != nil {
		t.Fatal(err)
	}
	waitLost(t, l, lossWithin)
	l.Unlock(ctx)
	l = next("an operator's purge")
	l.Unlock(ctx)
}

// TestOperatorWrites: a delete, a purge or a put of the held key by another
// client loses the lease at once, by the session's watcher, with the
// cause; the time from the write's answer to the loss is logged.
func TestOperatorWrites(t *testing.T) {
	nc := client(t, shared.URL(natstest.App))
	op := bucket(t, client(t, shared.URL(natstest.App)), natslease.DefaultBucket)
	for _, c := range []struct {
		name  string
		write func(ctx context.Context, key string) error
		want  error
	}{
		{"delete", func(ctx context.Context, key string) error { return op.Delete(ctx, key) }, natslease.ErrDeleted},
		{"purge", func(ctx context.Context, key string) error { return op.Purge(ctx, key) }, natslease.ErrPurged},
		{"put", func(ctx context.Context, key string) error {
			_, err := op.Put(ctx, key, []byte("operator"))
			return err
		}, natslease.ErrTakenOver},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := keyName(t)
			l := mustLock(t, natslease.Config{TTL: 30 * time.Second}, nc, key)
			if err := c.write(t.Context(), key); err != nil {
				t.Fatal(err)
			}
			at := time.Now()
			err := waitLost(t, l, lossWithin)
			t.Logf("lost %v after the %s's answer: %v", time.Since(at), c.name, err)
			var le *lost.Error
			if !errors.As(err, &le) || le.Subject() != key {
				t.Errorf("Err() = %v, want a *lost.Error of %q", err, key)
			}
			if !errors.Is(err, c.want) {
				t.Errorf("Err() = %v, want %v", err, c.want)
			}
			if c.name == "put" {
				op.Purge(t.Context(), key)
			}
		})
	}
}

// TestManyLeasesOneSession: 1,000 leases of one client share one session:
// one watcher (one consumer of the bucket's stream) and a number of
// goroutines that does not grow with the leases, observed or not.
func TestManyLeasesOneSession(t *testing.T) {
	const n = 1000
	url := shared.URL(natstest.App)
	name := "many"
	if err := createBucket(url, name, 1); err != nil {
		t.Fatal(err)
	}
	nc := client(t, url)
	cfg := natslease.Config{Bucket: name, TTL: 10 * time.Second}
	observed := cfg
	observed.Observer = health.ObserverFunc(func(health.Event) {})
	ctx := t.Context()
	first := mustLock(t, cfg, nc, keyName(t))
	_ = first
	before := runtime.NumGoroutine()
	var ls []*natslease.Lease
	for i := range n - 1 {
		c := cfg
		if i%2 == 0 {
			c = observed
		}
		l, err := c.Lock(ctx, nc, keyName(t))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if g := runtime.NumGoroutine(); g > before+10 {
		t.Errorf("%d goroutines with %d leases, %d with one: want no goroutine per lease", g, n, before)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, "KV_"+name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.State.Consumers; c != 1 {
		t.Errorf("the bucket's stream has %d consumers with %d leases of one client, want 1 (the session's watcher)", c, n)
	}
	for _, l := range ls {
		if err := l.Signal().Err(); err != nil {
			t.Errorf("a lease was lost: %v", err)
			break
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPermissionTakenAway: a holder whose permission to publish to its key
// is taken away (the server's configuration reloaded) is lost at its next
// renewal with ErrRefused, not at its deadline after retries; its observer
// is told of the loss as learned from the renewal's answer.
func TestPermissionTakenAway(t *testing.T) {
	s := natstest.StartT(t)
	if err := createBucket(s.URL(natstest.App), natslease.DefaultBucket, 1); err != nil {
		t.Fatal(err)
	}
	nc := client(t, s.URL(natstest.Revocable))
	key := keyName(t)
	rec := &healthrec.Recorder{}
	l := mustLock(t, natslease.Config{TTL: 3 * time.Second, Observer: rec}, nc, key)
	if err := s.RevokePublish(); err != nil {
		t.Fatal(err)
	}
	// A renewal refused is a loss with ErrRefused; the deadline would say
	// ErrRenewalUnconfirmed.
	err := waitLost(t, l, lossWithin)
	if !errors.Is(err, natslease.ErrRefused) {
		t.Fatalf("Err() = %v, want ErrRefused", err)
	}
	t.Logf("lost: %v", err)
	all := rec.WaitFor(t, health.Lost, 1)
	if e := all[len(all)-1]; e.Kind != health.Lost || e.Via != health.Answer || e.Err != err {
		t.Errorf("last event = %v via %v (%v), want the loss via the answer: %v", e.Kind, e.Via, e.Err, healthrec.Kinds(all))
	}
}

// TestResetDuringRenewal: a connection reset while a renewal waits for its
// answer is not a loss: the renewal is given up with the connection and
// tried again once the session has reconnected, long before the deadline.
// The link is slowed for the renewal's request to be inside the proxy when
// the connection is reset, so that no answer can come.
func TestResetDuringRenewal(t *testing.T) {
	p, err := faultnet.Listen(shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec := &healthrec.Recorder{}
	cfg := natslease.Config{TTL: 2 * time.Second, Observer: rec}
	l := mustLock(t, cfg, client(t, "nats://app:app@"+p.Addr()), keyName(t))
	period := cfg.TTL / 3 // the default RenewPeriod
	for i := range 3 {
		all := rec.WaitFor(t, health.Renewed, rec.Count(health.Renewed)+1)
		last := all[len(all)-1]
		for j := len(all) - 1; j >= 0 && last.Kind != health.Renewed; j-- {
			last = all[j]
		}
		// The next renewal is sent a period after this one; its request
		// waits 400 ms in the proxy, and the reset comes 200 ms into it.
		p.Delay(400 * time.Millisecond)
		time.Sleep(time.Until(last.Sent.Add(period + 200*time.Millisecond)))
		cut := time.Now()
		p.Cut()
		p.Heal()
		for renewed := false; !renewed; {
			select {
			case <-rec.Notify():
			case <-l.Signal().Done():
				t.Fatalf("reset %d: the lease was lost by a reset during a renewal: %v (events %v)", i, l.Signal().Err(), healthrec.Kinds(rec.Events()))
			case <-time.After(time.Minute):
				t.Fatalf("reset %d: no renewal within a minute", i)
			}
			for _, e := range rec.Events() {
				if e.Kind == health.Renewed && e.Sent.After(cut) {
					renewed = true
				}
			}
		}
	}
}
