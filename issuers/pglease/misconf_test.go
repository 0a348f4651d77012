package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
	"github.com/zukhruf/lease/lost"
)

// The tests of the README's "what you may get wrong" table: each mistake
// made against the real server, and what Lock does with it. A mistake that
// cannot heal returns its cause at once: these tests give Lock a context
// whose deadline only guards against a hang, check that the error is not
// the context's, and count the connection attempts (one: no retry).

// dialCounter counts the connections a pool dials.
type dialCounter struct{ n atomic.Int32 }

// pool returns a pool for connString, closed at the end of the test, whose
// dials c counts; edit, if not nil, changes its configuration first.
func (c *dialCounter) pool(t *testing.T, connString string, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	pcfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.n.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	if edit != nil {
		edit(pcfg)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// lockRefused calls Lock, which must fail with a cause that cannot heal:
// it returns the error, failing the test if Lock was granted or ran until
// the guard's deadline.
func lockRefused(t *testing.T, cfg pglease.Config, pool *pgxpool.Pool, subject string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	l, err := cfg.Lock(ctx, pool, subject)
	if l != nil {
		unlock(t, l)
		t.Fatalf("Lock = a lease, want an error")
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "pglease: lock ") {
		t.Fatalf("Lock = %v, want pglease's error with its cause, before the guard's deadline", err)
	}
	return err
}

// wantSQLState fails the test unless err wraps a *pgconn.PgError with code.
func wantSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code {
		t.Errorf("Lock = %v, want it to wrap the server's error %s", err, code)
	}
}

// wantDials fails the test unless c counted want dials.
func wantDials(t *testing.T, c *dialCounter, want int32) {
	t.Helper()
	if n := c.n.Load(); n != want {
		t.Errorf("Lock dialed %d times, want %d", n, want)
	}
}

// execAll runs each statement on conn, failing the test on an error.
func execAll(t *testing.T, conn *pgx.Conn, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// roleURL is the URL of the database postgres as role, with password if
// not empty, through the server's TCP address.
func roleURL(role, password string) string {
	if password != "" {
		role += ":" + password
	}
	return fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", role, server.Addr())
}

// TestMistakeWrongPassword: a role that must give a password gives the
// wrong one: Lock returns the server's 28P01 at once, after one attempt;
// with the right one it is granted.
func TestMistakeWrongPassword(t *testing.T) {
	admin := connect(t, server, server.Addr())
	execAll(t, admin, "create role pw login password 'right'")
	t.Cleanup(func() { admin.Exec(context.Background(), "drop role pw") })
	if err := server.RequirePassword("pw"); err != nil {
		t.Fatal(err)
	}
	var c dialCounter
	err := lockRefused(t, fast, c.pool(t, roleURL("pw", "wrong"), nil), "wrong password")
	wantSQLState(t, err, "28P01")
	wantDials(t, &c, 1)
	t.Logf("wrong password: %v", err)
	unlock(t, lock(t, fast, newPoolURL(t, roleURL("pw", "right")), "right password"))
}

// TestMistakeNoSuchDatabase: the pool names a database that does not
// exist: 3D000 at once.
func TestMistakeNoSuchDatabase(t *testing.T) {
	var c dialCounter
	err := lockRefused(t, fast, c.pool(t, "postgres://postgres@"+server.Addr()+"/nosuch?sslmode=disable", nil), "no database")
	wantSQLState(t, err, "3D000")
	wantDials(t, &c, 1)
	t.Logf("no such database: %v", err)
}

// TestMistakeRoleCannotLogin: the pool's role exists without LOGIN: 28000
// at once.
func TestMistakeRoleCannotLogin(t *testing.T) {
	admin := connect(t, server, server.Addr())
	execAll(t, admin, "create role nologin_role nologin")
	t.Cleanup(func() { admin.Exec(context.Background(), "drop role nologin_role") })
	var c dialCounter
	err := lockRefused(t, fast, c.pool(t, roleURL("nologin_role", ""), nil), "no login")
	wantSQLState(t, err, "28000")
	wantDials(t, &c, 1)
	t.Logf("role without login: %v", err)
}

// TestMistakeNothingListening: the pool's address has no server: the
// connection refused, at once.
func TestMistakeNothingListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var c dialCounter
	err = lockRefused(t, fast, c.pool(t, "postgres://postgres@"+addr+"/postgres?sslmode=disable", nil), "nothing listening")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Lock = %v, want it to wrap ECONNREFUSED", err)
	}
	wantDials(t, &c, 1)
	t.Logf("nothing listening: %v", err)
}

// TestMistakeNoSuchHost: the pool's host name does not resolve (.invalid
// never does): the resolver's error, at once, without a dial.
func TestMistakeNoSuchHost(t *testing.T) {
	var c dialCounter
	err := lockRefused(t, fast, c.pool(t, "postgres://postgres@nosuch.invalid:5432/postgres?sslmode=disable", nil), "no host")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) {
		t.Errorf("Lock = %v, want it to wrap a *net.DNSError", err)
	}
	wantDials(t, &c, 0)
	t.Logf("no such host: %v", err)
}

// TestMistakeFence: a fencing table that does not exist, one the role may
// not write, and names that PostgreSQL would not take as written. The first
// two fail at the fence, after the grant: Lock returns the server's error
// at once and leaves no lock; the names are refused before any connection.
func TestMistakeFence(t *testing.T) {
	admin := connect(t, server, server.Addr())
	execAll(t, admin,
		"create table private_tokens (key bigint primary key, token bigint not null)",
		"create role nofence login")
	t.Cleanup(func() {
		admin.Exec(context.Background(), "drop table private_tokens")
		admin.Exec(context.Background(), "drop role nofence")
	})
	t.Run("missing table", func(t *testing.T) {
		cfg := fast
		cfg.Fence = pgx.Identifier{"public", "no_such_tokens"}
		err := lockRefused(t, cfg, newPool(t, server, server.Addr()), "fence missing")
		wantSQLState(t, err, "42P01")
		waitKeyFree(t, admin, cfg.Key("fence missing"))
	})
	t.Run("no permission", func(t *testing.T) {
		cfg := fast
		cfg.Fence = pgx.Identifier{"public", "private_tokens"}
		err := lockRefused(t, cfg, newPoolURL(t, roleURL("nofence", "")), "fence denied")
		wantSQLState(t, err, "42501")
		waitKeyFree(t, admin, cfg.Key("fence denied"))
		t.Logf("no permission on the fencing table: %v", err)
	})
	for name, id := range map[string]pgx.Identifier{
		"no part":         {},
		"an empty part":   {"public", ""},
		"four parts":      {"a", "b", "c", "d"},
		"a part too long": {strings.Repeat("t", 64)},
		"a NUL byte":      {"a\x00b"},
	} {
		t.Run(name, func(t *testing.T) {
			var c dialCounter
			cfg := fast
			cfg.Fence = id
			err := lockRefused(t, cfg, c.pool(t, server.ConnString(server.Addr()), nil), "fence name")
			if !strings.Contains(err.Error(), "Config.Fence") {
				t.Errorf("Lock = %v, want an error naming Config.Fence", err)
			}
			wantDials(t, &c, 0)
		})
	}
}

// TestMistakeDurations: durations out of their documented range are
// refused, naming the field and the bound, before any connection; none is
// rounded to 0 (off) or wrapped. The ceiling itself is taken, and a
// fraction of a millisecond is rounded up.
func TestMistakeDurations(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  pglease.Config
		want string
	}{
		"nanoseconds":                     {pglease.Config{Heartbeat: 1, Deadline: 2, ServerTimeout: 3}, "Config.Heartbeat 1ns is under its floor 10ms"},
		"heartbeat under the floor":       {pglease.Config{Heartbeat: 9 * time.Millisecond}, "Config.Heartbeat 9ms is under its floor"},
		"negative heartbeat":              {pglease.Config{Heartbeat: -time.Second}, "Config.Heartbeat -1s is under its floor"},
		"deadline not over the heartbeat": {pglease.Config{Heartbeat: time.Second, Deadline: time.Second}, "Config.Deadline 1s is not longer than Config.Heartbeat"},
		"negative deadline":               {pglease.Config{Deadline: -time.Second}, "Config.Deadline -1s is not over its floor: it must be longer than MinHeartbeat 10ms"},
		"deadline at the heartbeat floor": {pglease.Config{Deadline: pglease.MinHeartbeat}, "Config.Deadline 10ms is not over its floor: it must be longer than MinHeartbeat 10ms"},
		"server timeout at its floor":     {pglease.Config{ServerTimeout: 2 * pglease.MinHeartbeat}, "Config.ServerTimeout 20ms is not over its floor 20ms: the Deadline derived from it, 10ms, must be longer than MinHeartbeat 10ms"},
		"heartbeat not under the timeout": {pglease.Config{Heartbeat: 3 * time.Second, ServerTimeout: 3 * time.Second}, "Config.Heartbeat 3s is not shorter than Config.ServerTimeout 3s: no Deadline fits between them"},
		"server timeout under 1ms":        {pglease.Config{Heartbeat: 10 * time.Millisecond, Deadline: 20 * time.Millisecond, ServerTimeout: 500 * time.Microsecond}, "Config.ServerTimeout 500µs is under 1ms: PostgreSQL counts it in whole milliseconds, and 0 turns its timeouts off"},
		"server timeout over the ceiling": {pglease.Config{ServerTimeout: pglease.MaxServerTimeout + time.Millisecond}, "is over its ceiling 596h31m23.647s (2^31-1 ms)"},
		"server timeout of 2^32+15 s":     {pglease.Config{ServerTimeout: (1<<32 + 15) * time.Second}, "is over its ceiling"},
		"deadline not under the timeout":  {pglease.Config{Deadline: 10 * time.Second, ServerTimeout: 10 * time.Second}, "Config.Deadline 10s is not shorter than Config.ServerTimeout 10s"},
	} {
		t.Run(name, func(t *testing.T) {
			var c dialCounter
			err := lockRefused(t, tc.cfg, c.pool(t, server.ConnString(server.Addr()), nil), "durations")
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Lock = %v, want it to say %q", err, tc.want)
			}
			wantDials(t, &c, 0)
		})
	}
	for _, tc := range []struct {
		cfg  pglease.Config
		want string
	}{
		{pglease.Config{ServerTimeout: pglease.MaxServerTimeout}, "2147483647ms"},
		{pglease.Config{Heartbeat: 100*time.Millisecond + 1, Deadline: time.Second, ServerTimeout: 2*time.Second + 1}, "2001ms"},
	} {
		conn := connect(t, server, server.Addr())
		if err := pglease.SetTimeouts(context.Background(), conn, tc.cfg); err != nil {
			t.Fatalf("SetTimeouts(%+v) = %v", tc.cfg, err)
		}
		var got string
		if err := conn.QueryRow(context.Background(), "show idle_session_timeout").Scan(&got); err != nil {
			t.Fatal(err)
		}
		// The server shows a whole number of milliseconds in its largest
		// unit; ask it to compare.
		var same bool
		if err := conn.QueryRow(context.Background(), "select $1::interval = $2::interval", got, tc.want).Scan(&same); err != nil || !same {
			t.Errorf("ServerTimeout %v: idle_session_timeout = %s, want %s (%v)", tc.cfg.ServerTimeout, got, tc.want, err)
		}
	}
	unlock(t, lock(t, pglease.Config{ServerTimeout: pglease.MaxServerTimeout}, newPool(t, server, server.Addr()), "the ceiling"))
}

// TestMistakeLongSubject: a subject of 1 MB is named in Lock's and
// Unlock's errors by its first 64 bytes and "…", not copied.
func TestMistakeLongSubject(t *testing.T) {
	subject := strings.Repeat("s", 1<<20)
	const limit = 1 << 10 // the error's own words, and the server's
	err := lockRefused(t, pglease.Config{Heartbeat: time.Nanosecond}, newPool(t, server, server.Addr()), subject)
	if len(err.Error()) > limit || !strings.Contains(err.Error(), `"`+strings.Repeat("s", 64)+`"…`) {
		t.Errorf("Lock's error is %d bytes, want at most %d with the subject cut to 64 bytes: %.200s", len(err.Error()), limit, err)
	}
	admin := connect(t, server, server.Addr())
	l := lock(t, fast, newPool(t, server, server.Addr()), subject)
	terminate(t, admin, holder(t, admin, l.Key()))
	waitLost(t, l)
	if n := len(l.Signal().Err().Error()); n > limit {
		t.Errorf("Signal().Err() is %d bytes, want at most %d: %.200s", n, limit, l.Signal().Err())
	}
	err = l.Unlock(context.Background())
	var lostErr *lost.Error
	if !errors.As(err, &lostErr) || lostErr.Subject() != subject || !errors.Is(err, pglease.ErrTerminated) {
		t.Errorf("Unlock = %.200v, want it to wrap the loss, a *lost.Error on the subject, with ErrTerminated", err)
	}
	if len(err.Error()) > limit {
		t.Errorf("Unlock's error is %d bytes, want at most %d: %.200s", len(err.Error()), limit, err)
	}
	t.Logf("Unlock: %v", err)
}

// TestMistakeTooManyConnections: the pool's role may open no connection
// (CONNECTION LIMIT 0), a mistake that may heal: Lock retries with backoff
// (at most 10 attempts in 3 s), and is granted once the limit is lifted; a
// Lock cut by its context returns an error that wraps both the context's
// error and the server's 53300.
func TestMistakeTooManyConnections(t *testing.T) {
	admin := connect(t, server, server.Addr())
	execAll(t, admin, "create role limited login connection limit 0")
	t.Cleanup(func() { admin.Exec(context.Background(), "drop role limited") })
	var c dialCounter
	pool := c.pool(t, roleURL("limited", ""), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan granted, 1)
	go func() {
		l, err := fast.Lock(ctx, pool, "limited")
		done <- granted{lease: l, err: err}
	}()
	time.Sleep(3 * time.Second)
	n := c.n.Load()
	if n < 2 || n > 10 {
		t.Errorf("%d attempts in 3 s, want 2 to 10: retried, with backoff", n)
	}
	t.Logf("%d attempts in 3 s while the role may not connect", n)
	execAll(t, admin, "alter role limited connection limit -1")
	g := waitGranted(t, done)
	if g.err != nil {
		t.Fatalf("Lock after the limit was lifted = %v", g.err)
	}
	unlock(t, g.lease)

	execAll(t, admin, "alter role limited connection limit 0")
	// The first lease's shared session outlives it by a few heartbeats, and
	// would serve the next Lock without a connection: end it.
	pglease.CloseIdleSessions()
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	_, err := fast.Lock(cctx, pool, "limited")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock cut by its context = %v, want it to wrap context.DeadlineExceeded", err)
	}
	wantSQLState(t, err, "53300")
	t.Logf("cut by its context: %v", err)
}

// TestMistakePoolExhausted: the caller holds every connection of the pool
// (MaxConns 1): Lock waits for one, bounded by its context, and its error
// wraps both the context's error and its cause.
func TestMistakePoolExhausted(t *testing.T) {
	var c dialCounter
	pool := c.pool(t, server.ConnString(server.Addr()), func(p *pgxpool.Config) { p.MaxConns = 1 })
	held, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	errShutdown := errors.New("the caller shuts down")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, errShutdown)
	defer cancel()
	if _, err := fast.Lock(ctx, pool, "exhausted"); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errShutdown) {
		t.Errorf("Lock with the pool exhausted = %v, want it to wrap context.DeadlineExceeded and the context's cause", err)
	}
	held.Release()
	unlock(t, lock(t, fast, pool, "exhausted"))
}

// shadowSQL makes the schema shadow, whose functions, operators and views
// stand for the server's when it comes first in search_path: each claims
// what a lease wants to hear and does nothing.
var shadowSQL = []string{
	"create schema shadow",
	"create function shadow.pg_advisory_lock(bigint) returns void language sql as 'select'",
	"create function shadow.pg_advisory_unlock(bigint) returns boolean language sql as 'select true'",
	"create function shadow.pg_try_advisory_lock(bigint) returns boolean language sql as 'select true'",
	"create function shadow.set_config(text, text, boolean) returns text language sql as 'select $2'",
	"create function shadow.current_setting(text, boolean) returns text language sql as 'select null::text'",
	"create function shadow.pg_is_in_recovery() returns boolean language sql as 'select false'",
	"create function shadow.eq(oid, integer) returns boolean language sql as 'select true'",
	"create operator shadow.= (leftarg = oid, rightarg = integer, function = shadow.eq)",
	"create view shadow.pg_locks as select * from pg_catalog.pg_locks where false",
	"create view shadow.pg_settings as select name, '2147483647'::text as setting from pg_catalog.pg_settings",
}

// shadowPool returns a pool whose sessions put the schema shadow first in
// their search_path.
func shadowPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	admin := connect(t, server, server.Addr())
	execAll(t, admin, shadowSQL...)
	t.Cleanup(func() { admin.Exec(context.Background(), "drop schema shadow cascade") })
	var c dialCounter
	return c.pool(t, server.ConnString(server.Addr()), func(p *pgxpool.Config) {
		p.ConnConfig.RuntimeParams["search_path"] = "shadow, pg_catalog, public"
	})
}

// TestMistakeSearchPathShadowed: the pool's search_path puts a schema
// first whose pg_advisory_lock, set_config, pg_locks, an = operator and
// more do nothing: 30 leases taken through it are each backed by the
// server, for the lease's session, and another session cannot take the
// lock; Unlock releases it.
func TestMistakeSearchPathShadowed(t *testing.T) {
	pool := shadowPool(t)
	admin := connect(t, server, server.Addr())
	const tries = 30
	lockless := 0
	for i := range tries {
		l := lock(t, fast, pool, "shadowed")
		var leasePID int32
		if err := admin.QueryRow(context.Background(), "select coalesce((select pid from pg_locks where granted and "+keyCond(l.Key())+"), 0)").Scan(&leasePID); err != nil {
			t.Fatal(err)
		}
		var taken bool
		if err := admin.QueryRow(context.Background(), "select pg_try_advisory_lock($1::bigint)", l.Key()).Scan(&taken); err != nil {
			t.Fatal(err)
		}
		if taken {
			admin.Exec(context.Background(), "select pg_advisory_unlock($1::bigint)", l.Key())
		}
		if leasePID == 0 || taken {
			lockless++
			t.Errorf("try %d: a live lease whose lock the server does not hold (holder %d, another session took it: %v)", i, leasePID, taken)
		}
		unlock(t, l)
		if n := keyLocks(t, admin, l.Key()); n != 0 {
			t.Fatalf("try %d: %d sessions hold the lock after Unlock, want 0", i, n)
		}
	}
	t.Logf("%d leases through a shadowing search_path: %d without the server's lock", tries, lockless)
}

// TestLockChecksGrant: with the wait's statement made to call the shadow
// pg_advisory_lock, which returns without a lock, Lock sees in pg_locks
// that the server granted nothing and refuses with ErrNotGranted.
func TestLockChecksGrant(t *testing.T) {
	pool := shadowPool(t)
	defer pglease.SetLockSQL("select pg_advisory_lock(%d), pg_catalog.pg_backend_pid() where %s")()
	own := fast // the wait with pg_advisory_lock is a lease's alone on its session
	own.OwnSession = true
	err := lockRefused(t, own, pool, "not granted")
	if !errors.Is(err, pglease.ErrNotGranted) {
		t.Errorf("Lock = %v, want ErrNotGranted", err)
	}
}

// TestMistakeSessionPoolerOnTransactionPooler declares SessionPooler for
// PgBouncer in transaction mode (pool_size 1 and 20) and in statement mode
// (pool_size 20): 30 tries each of two Locks of one lock at once, each on a pool of its own:
// Lock sees another client reach its session, and refuses with ErrPooled
// before it takes the lock; no lease is granted, so no two are live.
func TestMistakeSessionPoolerOnTransactionPooler(t *testing.T) {
	cfg := fast
	cfg.SessionPooler = true
	admin := connect(t, server, server.Addr())
	for _, tc := range []struct {
		mode  string
		size  int
		tries int
	}{{"transaction", 1, 30}, {"transaction", 20, 30}, {"statement", 20, 30}} {
		t.Run(fmt.Sprintf("%s pool_size %d", tc.mode, tc.size), func(t *testing.T) {
			b := startBouncer(t, tc.mode, tc.size)
			pools := [2]*pgxpool.Pool{newPool(t, server, b.Addr()), newPool(t, server, b.Addr())}
			grantedN, pooledN := 0, 0
			for i := range tc.tries {
				var wg sync.WaitGroup
				var outs [2]granted
				for p := range pools {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
						defer cancel()
						l, err := cfg.Lock(ctx, pools[p], "misdeclared")
						outs[p] = granted{lease: l, err: err}
					})
				}
				wg.Wait()
				for p, g := range outs {
					switch {
					case g.lease != nil:
						grantedN++
						t.Errorf("try %d, pool %d: a lease granted through a %s pooler", i, p, tc.mode)
						g.lease.Unlock(context.Background())
					case errors.Is(g.err, pglease.ErrPooled):
						pooledN++
					default:
						t.Errorf("try %d, pool %d: Lock = %v, want ErrPooled", i, p, g.err)
					}
				}
				if n := keyLocks(t, admin, cfg.Key("misdeclared")); n != 0 {
					t.Fatalf("try %d: %d sessions hold or wait for the lock after both Locks returned, want 0", i, n)
				}
			}
			t.Logf("%d tries of two Locks: %d granted, %d refused with ErrPooled; e.g. %v", tc.tries, grantedN, pooledN, errExample(t, cfg, pools[0]))
		})
	}
}

// TestMistakeSessionPoolerInStep declares SessionPooler for PgBouncer in
// transaction mode (pool_size 20) and takes one lock from two pools at
// once, 2,000 times: two probes at once can fall into step, each second
// connection given the other Lock's server connection, which looks like a
// session of its own. With 4 rounds and no pauses 2 Locks in 2,000 were
// granted that way.
func TestMistakeSessionPoolerInStep(t *testing.T) {
	const tries = 2000
	cfg := fast
	cfg.SessionPooler = true
	b := startBouncer(t, "transaction", 20)
	pools := [2]*pgxpool.Pool{newPool(t, server, b.Addr()), newPool(t, server, b.Addr())}
	var grantedN, pooledN atomic.Int64
	for i := range tries {
		var wg sync.WaitGroup
		for p := range pools {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				defer cancel()
				l, err := cfg.Lock(ctx, pools[p], "in step")
				switch {
				case l != nil:
					grantedN.Add(1)
					t.Errorf("try %d, pool %d: a lease granted through a transaction pooler", i, p)
					l.Unlock(context.Background())
				case errors.Is(err, pglease.ErrPooled):
					pooledN.Add(1)
				default:
					t.Errorf("try %d, pool %d: Lock = %v, want ErrPooled", i, p, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			break
		}
	}
	t.Logf("%d tries of two Locks at once: %d granted, %d refused with ErrPooled", tries, grantedN.Load(), pooledN.Load())
}

// errExample returns the error of one more Lock through pool.
func errExample(t *testing.T, cfg pglease.Config, pool *pgxpool.Pool) error {
	t.Helper()
	l, err := cfg.Lock(context.Background(), pool, "misdeclared")
	if l != nil {
		unlock(t, l)
	}
	return err
}

// newPoolURL returns a pool for url, closed at the end of the test.
func newPoolURL(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestMistakeServerShuttingDown: a Lock while the server shuts down (a
// smart shutdown waits for a session that stays open), which refuses new
// connections with 57P03 until it has stopped: retried with backoff, and
// cut by its context with an error that wraps both the context's error and
// the server's 57P03.
func TestMistakeServerShuttingDown(t *testing.T) {
	s, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	open := connect(t, s, s.Addr())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop("smart") }()
	var c dialCounter
	pool := c.pool(t, s.ConnString(s.Addr()), nil)
	// The shutdown has begun once a connection is refused with 57P03.
	deadline := time.Now().Add(waitTimeout)
	for {
		conn, err := s.Connect(context.Background(), s.Addr())
		if err == nil {
			conn.Close(context.Background())
		} else if strings.Contains(err.Error(), "57P03") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still takes connections %v after a smart shutdown began", waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = fast.Lock(ctx, pool, "shutting down")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock during a shutdown, cut by its context = %v, want it to wrap context.DeadlineExceeded", err)
	}
	wantSQLState(t, err, "57P03")
	if n := c.n.Load(); n < 2 || n > 8 {
		t.Errorf("%d attempts in 1.5 s, want 2 to 8: retried, with backoff", n)
	}
	t.Logf("%d attempts: %v", c.n.Load(), err)
	open.Close(context.Background())
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// sessionState reads, in one statement, the settings Lock sets in its
// session and the lease's mark.
const sessionState = "select current_setting('idle_session_timeout'), current_setting('tcp_user_timeout'), " +
	"current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count'), " +
	"current_setting('client_connection_check_interval'), current_setting('statement_timeout'), current_setting('lock_timeout'), " +
	"coalesce(current_setting('pglease.session', true), '')"

// readState returns what sessionState reads on conn, with the simple
// protocol that every pooler mode serves.
func readState(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	results, err := conn.PgConn().Exec(t.Context(), sessionState).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || len(results[0].Rows) != 1 {
		t.Fatalf("%s returned %d results, want one row", sessionState, len(results))
	}
	var state []string
	for _, col := range results[0].Rows[0] {
		state = append(state, string(col))
	}
	return state
}

// TestMistakeSessionPoolerLeavesNoSettings declares SessionPooler for
// PgBouncer in transaction and statement mode with one server connection:
// Lock is refused with ErrPooled, and a client of the pooler then reaches
// that server connection with the server's own settings and no lease's
// mark. Lock checks the pooler before it changes the session, which a
// pooler that shares it would hand to its other clients (a
// statement_timeout, idle_session_timeout and keepalives of the lease's).
func TestMistakeSessionPoolerLeavesNoSettings(t *testing.T) {
	cfg := fast
	cfg.SessionPooler = true
	want := readState(t, connect(t, server, server.Addr()))
	for _, mode := range []string{"transaction", "statement"} {
		t.Run(mode, func(t *testing.T) {
			b := startBouncer(t, mode, 1)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			l, err := cfg.Lock(ctx, newPool(t, server, b.Addr()), "misdeclared")
			if l != nil {
				unlock(t, l)
			}
			if !errors.Is(err, pglease.ErrPooled) {
				t.Fatalf("Lock = %v, want ErrPooled", err)
			}
			if got := readState(t, connect(t, server, b.Addr())); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("a client of the pooler after the refused Lock reads %q, want the server's own %q", got, want)
			}
		})
	}
}

// TestProbeBoundedByDeadline: through PgBouncer in session mode with
// SessionPooler set, the lease's connection goes silent as Lock checks that
// the pooler does not share the session, while the check's second
// connection is answered: Lock fails within the check's bound (the
// Deadline, 1 s, and as long again for the cancel), not when its context
// ends (10 s).
func TestProbeBoundedByDeadline(t *testing.T) {
	b := startBouncer(t, "session", 4)
	proxy, err := faultnet.Listen(b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	pcfg, err := pgxpool.ParseConfig(server.ConnString(proxy.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	var probing atomic.Bool
	host, port, err := net.SplitHostPort(b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pcfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		if probing.Load() { // the check's second connection goes to the pooler directly
			var p uint16
			fmt.Sscan(port, &p)
			cc.Host, cc.Port = host, p
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pglease.SetStepHook(func(_ context.Context, s string) {
		if s == pglease.StepProbe {
			probing.Store(true)
			proxy.Drop(faultnet.Both)
		}
	})
	defer pglease.SetStepHook(nil)
	cfg := fast
	cfg.SessionPooler = true
	// A server timeout past the guard: no setting of the server's, which
	// a Lock that set them first would have made, ends the silent session
	// before the guard does.
	cfg.ServerTimeout = 2 * waitTimeout
	guard := errors.New("the test's guard against a hang")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 10*cfg.Deadline, guard)
	defer cancel()
	start := time.Now()
	l, err := cfg.Lock(ctx, pool, "silent at the probe")
	took := time.Since(start)
	proxy.Heal()
	if l != nil {
		unlock(t, l)
		t.Fatal("Lock = a lease, want an error")
	}
	if errors.Is(err, guard) || !strings.Contains(err.Error(), "not done within 1s") {
		t.Errorf("Lock = %v, want the check cut by its own bound (1s), not by the context", err)
	}
	t.Logf("Lock returned after %v: %v", took.Round(time.Millisecond), err)
}
