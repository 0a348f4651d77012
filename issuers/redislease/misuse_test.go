package redislease_test

import (
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

// TestCutLockLeavesNothing cuts waiting Locks, and Locks at every moment of
// their grant: none leaves a goroutine or a key behind.
func TestCutLockLeavesNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// Closed before the check: the session a client's leases share lives
	// while the client is open.
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	t.Run("waiting", func(t *testing.T) {
		key := keyName(t)
		a := mustLock(t, short, rdb, key)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		l, err := short.Lock(ctx, rdb, key)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock = %v, %v; want the context's deadline", l, err)
		}
		v, _ := rdb.Get(t.Context(), key).Result()
		if !strings.HasSuffix(v, ":"+itoa(a.Token())) {
			t.Errorf("the key holds %q, want A's value", v)
		}
	})
	t.Run("granting", func(t *testing.T) {
		for i := range 200 {
			key := keyName(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Duration(rand.Int64N(int64(3*time.Millisecond))))
			l, err := short.Lock(ctx, rdb, key)
			cancel()
			if err == nil {
				l.Unlock(context.Background())
				continue
			}
			// A read or dial that timed out at the context's deadline
			// must still report the context's error.
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("try %d: Lock = %v, want an error matching context.DeadlineExceeded", i, err)
			}
			if n, _ := rdb.Exists(t.Context(), key).Result(); n != 0 {
				t.Fatalf("try %d: Lock = %v, and the key is left behind", i, err)
			}
		}
	})
}

// lossWithin bounds the wait for a loss the lease learns of by a push, or
// by its next renewal (a third of the TTL later): far above either, so
// that a loaded machine does not fail the test, and still below a wait
// that only the deadline would end with another cause.
const lossWithin = 5 * time.Second

// TestCallerMisuse does to rdb what a caller may: close it, kill the
// connections of other clients, run commands. None panics, and none leaves
// a live lease whose key is gone.
func TestCallerMisuse(t *testing.T) {
	t.Run("Close", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
		key := keyName(t)
		l := mustLock(t, short, rdb, key)
		rdb.Close()
		notLost(t, l, short.TTL+short.TTL/2) // its connections are its own
		op := client(t, shared.Addr())
		if err := op.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := waitLost(t, l, lossWithin); !errors.Is(err, redislease.ErrDeleted) {
			t.Fatalf("Err() = %v, want ErrDeleted", err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Errorf("Unlock = %v, want nil", err)
		}
	})
	t.Run("Close of a Sentinel client, then CLIENT KILL", func(t *testing.T) {
		// The lease can no longer ask the closed client's Sentinels: it
		// reconnects to the server it last reached, and releases there.
		g := redistest.StartGroup(t, 2)
		rdb := redis.NewFailoverClient(g.FailoverOptions())
		key := keyName(t)
		l := mustLock(t, short, rdb, key)
		rdb.Close()
		op := g.Primary.Client(t)
		if err := op.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		notLost(t, l, short.TTL+short.TTL/2)
		if err := l.Unlock(context.Background()); err != nil {
			t.Errorf("Unlock = %v, want nil", err)
		}
		if n, _ := op.Exists(t.Context(), key).Result(); n != 0 {
			t.Error("Unlock left the key")
		}
	})
	t.Run("CLIENT KILL", func(t *testing.T) {
		rdb := client(t, shared.Addr())
		key := keyName(t)
		l := mustLock(t, short, rdb, key)
		for range 5 {
			if err := rdb.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(short.TTL / 3)
		}
		notLost(t, l, short.TTL)
		if err := rdb.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := waitLost(t, l, lossWithin); !errors.Is(err, redislease.ErrDeleted) {
			t.Fatalf("Err() = %v, want ErrDeleted", err)
		}
	})
	t.Run("killed while the key is deleted", func(t *testing.T) {
		// The push of the deletion may be lost with the connection: the
		// reconnection reads the key.
		rdb := client(t, shared.Addr())
		for range 20 {
			key := keyName(t)
			l := mustLock(t, short, rdb, key)
			pipe := rdb.Pipeline()
			pipe.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "yes")
			pipe.Del(t.Context(), key)
			if _, err := pipe.Exec(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := waitLost(t, l, lossWithin); !errors.Is(err, redislease.ErrDeleted) {
				t.Fatalf("Err() = %v, want ErrDeleted", err)
			}
			l.Unlock(context.Background())
		}
	})
	t.Run("Unlock twice, Signal after Unlock", func(t *testing.T) {
		rdb := client(t, shared.Addr())
		key := keyName(t)
		l := mustLock(t, short, rdb, key)
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatalf("second Unlock = %v, want nil", err)
		}
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("Err() after Unlock = %v, want nil", err)
		}
		if n, _ := rdb.Exists(t.Context(), key).Result(); n != 0 {
			t.Fatal("the key is left after Unlock")
		}
	})
	t.Run("Unlock leaves another's key", func(t *testing.T) {
		rdb := client(t, shared.Addr())
		key := keyName(t)
		l := mustLock(t, short, rdb, key)
		if err := rdb.Set(t.Context(), key, "operator", 0).Err(); err != nil {
			t.Fatal(err)
		}
		waitLost(t, l, lossWithin)
		l.Unlock(context.Background())
		if v, _ := rdb.Get(t.Context(), key).Result(); v != "operator" {
			t.Fatalf("the key holds %q after Unlock, want the operator's value", v)
		}
	})
}

// TestMistakes: each mistake a caller may make fails Lock within a second,
// with an error that names it. The README's "what you may get wrong" table
// lists them.
func TestMistakes(t *testing.T) {
	secured := redistest.StartServer(t, "--requirepass", "secret")
	admin := redis.NewClient(&redis.Options{Addr: secured.Addr(), Password: "secret"})
	defer admin.Close()
	// A user without the commands the lease needs, as a managed service's
	// read-write role may be.
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@read", "+@write", "+@connection", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "+@all", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "norole", "on", ">pw", "~*", "+@all", "-role").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "appclaim", "on", ">pw", "~app:*", "~{app:x}:redislease-claim", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "apponly", "on", ">pw", "~app:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	freePort, _ := redistest.FreePort()
	closed := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	closed.Close()
	replica := redistest.StartServer(t, "--replicaof", "127.0.0.1", itoa(int64(shared.Port)))
	var typedNil *redis.Client
	wrongType := keyName(t)
	client(t, shared.Addr()).HSet(t.Context(), wrongType, "f", "v")
	cases := []struct {
		name string
		cfg  redislease.Config
		rdb  redis.UniversalClient
		key  string
		want string // in the error
	}{
		{"wrong address", short, own(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + itoa(int64(freePort))})), "k", "connection refused"},
		{"no password", short, own(t, redis.NewClient(&redis.Options{Addr: secured.Addr()})), "k", "NOAUTH"},
		{"wrong password", short, own(t, redis.NewClient(&redis.Options{Addr: secured.Addr(), Password: "wrong"})), "k", "WRONGPASS"},
		{"ACL without EVAL", short, own(t, redis.NewClient(&redis.Options{Addr: secured.Addr(), Username: "app", Password: "pw"})), "k", "NOPERM"},
		{"ACL without scripting", short, own(t, redis.NewClient(&redis.Options{Addr: secured.Addr(), Username: "noscripts", Password: "pw"})), "k", "NOPERM"},
		{"ACL without ROLE", short, own(t, redis.NewClient(&redis.Options{Addr: secured.Addr(), Username: "norole", Password: "pw"})), "k", "ROLE (Config.Replicas does without it, except behind Sentinel): NOPERM"},
		{"ACL key pattern without the claim and the token counter", short, own(t, redis.NewClient(&redis.Options{Addr: secured.Addr(), Username: "apponly", Password: "pw"})), "app:x", `the read of the key's claim "{app:x}:redislease-claim", which the lease writes beside the key "app:x" and its token counter "{app:x}:redislease-token"`},
		{"ACL key pattern without the token counter", short, own(t, redis.NewClient(&redis.Options{Addr: secured.Addr(), Username: "appclaim", Password: "pw"})), "app:x", `the grant script, which writes the key "app:x", its token counter "{app:x}:redislease-token" and its claim "{app:x}:redislease-claim"`},
		{"TTL too short", redislease.Config{TTL: 100 * time.Millisecond}, client(t, shared.Addr()), "k", "outside"},
		{"TTL too long", redislease.Config{TTL: 48 * time.Hour}, client(t, shared.Addr()), "k", "outside"},
		{"TTL in microseconds", redislease.Config{TTL: time.Second + time.Microsecond}, client(t, shared.Addr()), "k", "milliseconds"},
		{"margin too large", redislease.Config{TTL: 2 * time.Second, Margin: time.Second}, client(t, shared.Addr()), "k", "margin"},
		{"renew period too long", redislease.Config{TTL: 2 * time.Second, RenewPeriod: time.Second}, client(t, shared.Addr()), "k", "renew period"},
		{"negative replicas", redislease.Config{Replicas: -1}, client(t, shared.Addr()), "k", "replicas"},
		{"nil client", short, nil, "k", "nil client"},
		{"typed nil client", short, typedNil, "k", "nil *redis.Client"},
		{"closed client", short, closed, "k", "closed"},
		{"a Ring", short, own(t, redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": shared.Addr()}})), "k", "not supported"},
		{"a replica's address", short, client(t, replica.Addr()), "k", "replica"},
		{"empty key", short, client(t, shared.Addr()), "", "empty key"},
		{"a '}' without a hash tag", short, client(t, shared.Addr()), "a}b", "hash tag"},
		{"a key of another type", short, client(t, shared.Addr()), wrongType, "WRONGTYPE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			l, err := tc.cfg.Lock(ctx, tc.rdb, tc.key)
			took := time.Since(start)
			if err == nil {
				l.Unlock(context.Background())
				t.Fatalf("Lock = nil error, want one with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "redislease: ") {
				t.Errorf("Lock = %v, want an error of redislease with %q", err, tc.want)
			}
			if took > time.Second {
				t.Errorf("Lock took %v to fail, want at most 1 s", took)
			}
		})
	}
}

func TestZeroConfig(t *testing.T) {
	rdb := client(t, shared.Addr())
	key := keyName(t)
	l, err := redislease.Lock(t.Context(), rdb, key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	ttl, _ := rdb.PTTL(t.Context(), key).Result()
	if ttl <= redislease.DefaultTTL-time.Second || ttl > redislease.DefaultTTL {
		t.Errorf("PTTL = %v, want about the default TTL %v", ttl, redislease.DefaultTTL)
	}
}

func itoa(n int64) string { return formatInt(n) }

// own closes c when the test ends.
func own[C interface{ Close() error }](t testing.TB, c C) C {
	t.Cleanup(func() { c.Close() })
	return c
}

// TestMistakeGrantCommandDenied: a user whose ACL lacks a command of the
// grant script is refused with the command named, and the key is not
// written; the script runs TIME, GET and INCR before its first write, so
// a user without one of them leaves no token counter either, and a
// counter a refused SET left behind still gives a later grant a larger
// token.
func TestMistakeGrantCommandDenied(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	for _, cmd := range []string{"TIME", "GET", "INCR", "SET"} {
		t.Run(cmd, func(t *testing.T) {
			user := "no" + strings.ToLower(cmd)
			if err := admin.Do(t.Context(), "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "-"+strings.ToLower(cmd)).Err(); err != nil {
				t.Fatal(err)
			}
			key := keyName(t)
			rdb := own(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw"}))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			l, err := short.Lock(ctx, rdb, key)
			if err == nil {
				l.Unlock(context.Background())
				t.Fatal("Lock = nil error, want NOPERM naming " + cmd)
			}
			// GET is refused before the script too, by Redis's own words.
			if msg := err.Error(); !strings.Contains(msg, "NOPERM") || !strings.Contains(strings.ToUpper(msg), cmd) {
				t.Errorf("Lock = %v, want NOPERM naming %s", err, cmd)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("Lock took %v to fail, want at most 1 s", took)
			}
			if n, _ := admin.Exists(t.Context(), key).Result(); n != 0 {
				t.Error("the key was written")
			}
			counter, err := admin.Get(t.Context(), "{"+key+"}:redislease-token").Int64()
			if cmd != "SET" && !errors.Is(err, redis.Nil) {
				t.Errorf("the token counter holds %d, %v; want none: nothing written before the refusal", counter, err)
			}
			after := mustLock(t, short, admin, key)
			if after.Token() <= counter {
				t.Errorf("a later grant's token %d, want more than the counter %d left behind", after.Token(), counter)
			}
		})
	}
}

// TestMistakeSentinelWithoutClientList: behind Sentinel, the lease reads
// how long each replica has followed the primary (CLIENT LIST); a user
// without it is refused at once, with the command named.
func TestMistakeSentinelWithoutClientList(t *testing.T) {
	g := redistest.StartGroup(t, 2)
	if err := g.Primary.Client(t).Do(t.Context(), "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-client|list").Err(); err != nil {
		t.Fatal(err)
	}
	opt := g.FailoverOptions()
	opt.Username, opt.Password = "app", "pw"
	rdb := own(t, redis.NewFailoverClient(opt))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err := short.Lock(ctx, rdb, keyName(t))
	if err == nil {
		l.Unlock(context.Background())
		t.Fatal("Lock = nil error, want one naming CLIENT LIST")
	}
	if !strings.Contains(err.Error(), "CLIENT LIST") || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Lock = %v, want NOPERM naming CLIENT LIST", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Lock took %v to fail, want at most 1 s", took)
	}
}

// TestLockTLSHandshakeHonoursContext: go-redis's dialer makes a TLS
// handshake without the context, bounded only by DialTimeout; a server that
// accepts and never answers must not hold Lock past its context.
func TestLockTLSHandshakeHonoursContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range accepted {
			c.Close()
		}
	})
	rdb := own(t, redis.NewClient(&redis.Options{Addr: ln.Addr().String(), TLSConfig: &tls.Config{ServerName: "localhost"}, DialTimeout: time.Minute}))
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := short.Lock(ctx, rdb, keyName(t))
	if err == nil {
		l.Unlock(context.Background())
		t.Fatal("Lock = nil error against a server that never answers")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock = %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Lock took %v, want it cut by its 300 ms context", took)
	}
}

// totalConnections returns how many connections the server has accepted.
func totalConnections(t *testing.T, admin *redis.Client) int {
	t.Helper()
	info, err := admin.Info(t.Context(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no total_connections_received in INFO stats: %s", info)
	return 0
}

// TestConnectionLimit: the leases of one client share two connections of
// its session. At the server's maxclients, a second lease of the same
// client is granted on them, a Lock of another client fails at once naming
// the limit, and Unlock deletes the key on the session's connection,
// opening none.
//
// Redis writes its refusal when it accepts the connection, before HELLO is
// sent: a lease's connection must not begin to read before it has sent
// HELLO, or it takes the refusal for a reply to no command. Each of the
// lease's connections waits at its first write for a read to begin.
func TestConnectionLimit(t *testing.T) {
	srv := redistest.StartServer(t, "--maxclients", "3")
	var (
		mu    sync.Mutex
		conns []*readFirst
	)
	admin := own(t, redis.NewClient(&redis.Options{
		Addr:     srv.Addr(),
		PoolSize: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := new(net.Dialer).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			c := &readFirst{Conn: nc, reading: make(chan struct{})}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			return c, nil
		},
	}))
	key := keyName(t)
	l := mustLock(t, short, admin, key) // the server's three connections: admin's and the session's two
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// The leases of one client share its session's connections.
	l2 := mustLock(t, short, admin, keyName(t))
	if err := l2.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of a second lease at maxclients = %v, want nil", err)
	}
	other := own(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	start := time.Now()
	if l3, err := short.Lock(ctx, other, keyName(t)); err == nil {
		l3.Unlock(context.Background())
		t.Error("Lock over maxclients = nil error")
	} else if !strings.Contains(err.Error(), "maxclients") {
		t.Errorf("Lock over maxclients = %v, want an error naming maxclients", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Lock over maxclients took %v to fail, want at most 1 s", took)
	}
	mu.Lock()
	for i, c := range conns[1:] { // the first is admin's: go-redis reads only after it writes
		if c.readEarly.Load() {
			t.Errorf("the lease's connection %d began to read before it sent HELLO", i+1)
		}
	}
	mu.Unlock()
	before := totalConnections(t, admin)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock at maxclients = %v, want nil", err)
	}
	if after := totalConnections(t, admin); after != before {
		t.Errorf("Unlock opened %d connections, want none", after-before)
	}
	if n, _ := admin.Exists(t.Context(), key).Result(); n != 0 {
		t.Error("Unlock left the key")
	}
}

// TestPermissionTakenAway: a permission the lease needs, taken away from
// its user while it holds the key, loses it within the TTL with
// ErrRefused naming the command: EVAL and WAIT at the next renewal,
// CLIENT TRACKING at the reconnection that must turn it on again.
func TestPermissionTakenAway(t *testing.T) {
	primary := redistest.StartServer(t)
	redistest.StartServer(t, "--replicaof", "127.0.0.1", itoa(int64(primary.Port)))
	admin := primary.Client(t)
	// A replica starts in sync within a second or two; WAIT counts it once
	// it is.
	for start := time.Now(); admin.Wait(t.Context(), 1, 100*time.Millisecond).Val() < 1; {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the replica did not acknowledge a write within 30 s")
		}
	}
	for _, tc := range []struct{ rule, want string }{
		{"-eval", "eval"},
		{"-wait", "wait"},
		{"-client|tracking", "client|tracking"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			user := "app" + strings.ReplaceAll(tc.rule, "|", "")
			if err := admin.Do(t.Context(), "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all").Err(); err != nil {
				t.Fatal(err)
			}
			rdb := own(t, redis.NewClient(&redis.Options{Addr: primary.Addr(), Username: user, Password: "pw"}))
			l := mustLock(t, short, rdb, keyName(t))
			if err := admin.Do(t.Context(), "ACL", "SETUSER", user, tc.rule).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.want == "client|tracking" {
				// Tracking already on goes on; a new connection must
				// turn it on.
				if err := admin.ClientKillByFilter(t.Context(), "USER", user).Err(); err != nil {
					t.Fatal(err)
				}
			}
			err := waitLost(t, l, short.TTL)
			if !errors.Is(err, redislease.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Err() = %v, want ErrRefused naming %s", err, tc.want)
			}
		})
	}
}

// readFirst is a connection whose first write waits a tenth of a second for
// a read to begin, and records whether one did.
type readFirst struct {
	net.Conn
	reading   chan struct{} // closed by the first read
	once      sync.Once
	wrote     atomic.Bool
	readEarly atomic.Bool
}

func (c *readFirst) Read(p []byte) (int, error) {
	if !c.wrote.Load() {
		c.readEarly.Store(true)
	}
	c.once.Do(func() { close(c.reading) })
	return c.Conn.Read(p)
}

func (c *readFirst) Write(p []byte) (int, error) {
	if !c.wrote.Load() {
		select {
		case <-c.reading:
		case <-time.After(100 * time.Millisecond):
		}
		c.wrote.Store(true)
	}
	return c.Conn.Write(p)
}
