package mysqllease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/zukhruf/lease/issuers/mysqllease"
)

// mistakeTimeout is the context of a Lock that must fail at once; a Lock
// that waits for it instead fails the test by the error it returns (the
// context's), not by a measured time.
const mistakeTimeout = 30 * time.Second

// lockErr runs cfg.Lock with mistakeTimeout and returns its error,
// releasing a lease it should not have granted.
func lockErr(t *testing.T, cfg mysqllease.Config, dsn, subj string) error {
	t.Helper()
	db := open(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), mistakeTimeout)
	defer cancel()
	l, err := cfg.Lock(ctx, db, subj)
	if l != nil {
		l.Unlock(context.Background())
		t.Fatalf("Lock granted a lease, want an error")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock waited for its context instead of failing at once: %v", err)
	}
	return err
}

// TestConfigOutOfRange: each Config out of range is refused by Lock with an
// error naming the field, before it connects.
func TestConfigOutOfRange(t *testing.T) {
	for _, c := range []struct {
		cfg  mysqllease.Config
		want string
	}{
		{mysqllease.Config{ServerTimeout: 500 * time.Millisecond}, "Config.ServerTimeout 500ms is under 1s"},
		{mysqllease.Config{ServerTimeout: 1500 * time.Millisecond, Margin: time.Second / 2, Heartbeat: 100 * time.Millisecond}, "not a whole number of seconds"},
		{mysqllease.Config{ServerTimeout: mysqllease.MaxServerTimeout + time.Second}, "over its ceiling"},
		{mysqllease.Config{Margin: -time.Second}, "Config.Margin -1s is negative"},
		{mysqllease.Config{Margin: 10 * time.Second}, "Config.Margin 10s is not shorter than Config.ServerTimeout 10s"},
		{mysqllease.Config{Heartbeat: time.Millisecond}, "Config.Heartbeat 1ms is under its floor"},
		{mysqllease.Config{Heartbeat: 5 * time.Second}, "Config.Heartbeat 5s is not shorter than half the deadline"},
		{mysqllease.Config{Heartbeat: 2500 * time.Millisecond}, "Config.Heartbeat 2.5s is not shorter than half the deadline"},
		{mysqllease.Config{ServerTimeout: time.Second, Margin: 985 * time.Millisecond}, "Config.Margin 985ms leaves a deadline"},
		{mysqllease.Config{ServerTimeout: time.Second, Margin: 985 * time.Millisecond, Heartbeat: 10 * time.Millisecond}, "Config.Heartbeat 10ms is not shorter than half the deadline"},
		{mysqllease.Config{Sessions: -1}, "Config.Sessions -1 is negative"},
		{mysqllease.Config{Waiters: -1}, "Config.Waiters -1 is negative"},
		{mysqllease.Config{Grace: -time.Second}, "Config.Grace -1s is negative"},
		{mysqllease.Config{Grace: 6 * time.Second}, "Config.Grace 6s is longer than the deadline"},
		{mysqllease.Config{Fence: "a.b.c"}, "Config.Fence"},
		{mysqllease.Config{Fence: "a`b"}, "backtick"},
		{mysqllease.Config{Fence: strings.Repeat("t", 65)}, "over MySQL's 64 characters"},
	} {
		// An address where nothing listens: a Lock that got past the
		// Config would fail to connect there.
		err := lockErr(t, c.cfg, "root@tcp(127.0.0.1:1)/", "s")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Lock with %+v = %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
}

// TestSubjects: an empty subject and one with bytes the server would not
// name as given are refused; a long one is hashed, never cut; a Secret
// hashes every subject.
func TestSubjects(t *testing.T) {
	for _, s := range []string{"", "a\x00b", "\xff\xfe"} {
		if err := lockErr(t, fast, server.DSN("root", ""), s); err == nil || !strings.Contains(err.Error(), "subject") {
			t.Errorf("Lock(%q) = %v, want a refusal of the subject", s, err)
		}
	}
	db := rootDB(t, server)
	long := strings.Repeat("x", mysqllease.MaxNameLen) // exactly the limit: as is
	a := lock(t, fast, db, long)
	if a.Name() != long {
		t.Errorf("Name of a %d-character subject = %q, want the subject", mysqllease.MaxNameLen, a.Name())
	}
	// Two subjects longer than the limit, equal in their first 64
	// characters, are two locks.
	b := lock(t, fast, db, long+"1")
	c := lock(t, fast, db, long+"2")
	for _, l := range []*mysqllease.Lease{a, b, c} {
		if n := len([]rune(l.Name())); n > mysqllease.MaxNameLen {
			t.Errorf("Name %q has %d characters, over %d", l.Name(), n, mysqllease.MaxNameLen)
		}
		defer l.Unlock(context.Background())
	}
	if b.Name() == c.Name() || !strings.HasPrefix(b.Name(), "mysqllease:") {
		t.Errorf("long subjects named %q and %q, want two hashed names", b.Name(), c.Name())
	}
	keyed := mysqllease.Config{Secret: []byte("s3cret")}
	n1, _ := keyed.LockName("orders")
	n2, _ := mysqllease.Config{Secret: []byte("other")}.LockName("orders")
	if n1 == "orders" || n1 == n2 {
		t.Errorf("LockName with secrets = %q and %q, want two hashed names", n1, n2)
	}
}

// TestWrongCredentials: a wrong password, an unknown user, an unknown
// database are refused at once, with the server's error.
func TestWrongCredentials(t *testing.T) {
	admin := rootDB(t, server)
	mustExec(t, admin, "CREATE USER IF NOT EXISTS 'app'@'127.0.0.1' IDENTIFIED BY 'right'")
	for _, c := range []struct{ dsn, want string }{
		{server.DSN("app", "wrong"), "Access denied"},
		{server.DSN("nobody", ""), "Access denied"},
		{strings.Replace(server.DSN("root", ""), ")/", ")/nosuchdb", 1), "Unknown database"},
	} {
		err := lockErr(t, fast, c.dsn, subject(t))
		var me *mysql.MySQLError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Lock through %s = %v, want the server's %q", c.dsn, err, c.want)
		}
	}
}

// TestMissingPrivilege: a user who may not write the fencing table, and a
// fencing table that does not exist, are refused at once, before the wait:
// while another session holds the lock.
func TestMissingPrivilege(t *testing.T) {
	admin := rootDB(t, server)
	table := createFence(t, admin)
	mustExec(t, admin, "CREATE USER IF NOT EXISTS 'reader'@'127.0.0.1'")
	mustExec(t, admin, "GRANT SELECT ON test.* TO 'reader'@'127.0.0.1'")
	cfg := fast
	cfg.Fence = table
	subj := subject(t)
	rawLock(t, admin, subj, time.Second) // a Lock that waited for it would not fail at once
	err := lockErr(t, cfg, server.DSN("reader", ""), subj)
	if err == nil || !strings.Contains(err.Error(), "command denied") {
		t.Fatalf("Lock without INSERT on the fencing table = %v, want the server's refusal", err)
	}
	cfg.Fence = "test.no_such_table"
	if err := lockErr(t, cfg, server.DSN("root", ""), subj); err == nil || !strings.Contains(err.Error(), "doesn't exist") {
		t.Fatalf("Lock with a missing fencing table = %v, want the server's refusal", err)
	}
}

// TestNothingListening: an address where nothing listens is refused at
// once, with the network's error.
func TestNothingListening(t *testing.T) {
	err := lockErr(t, fast, "root@tcp(127.0.0.1:1)/", subject(t))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Lock where nothing listens = %v, want ECONNREFUSED", err)
	}
}

// TestTooManyConnections: a user at its connection limit is retried with
// backoff until ctx ends, and the error wraps both the context's and the
// server's; once a connection is freed, Lock is granted.
func TestTooManyConnections(t *testing.T) {
	admin := rootDB(t, server)
	mustExec(t, admin, "CREATE USER IF NOT EXISTS 'limited'@'127.0.0.1' WITH MAX_USER_CONNECTIONS 2")
	db := open(t, server.DSN("limited", ""))
	c1, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	subj := subject(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = fast.Lock(ctx, db, subj)
	cancel()
	var me *mysql.MySQLError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &me) || (me.Number != 1203 && me.Number != 1226) {
		t.Fatalf("Lock at the user's connection limit = %v, want the context's error and the server's 1226 or 1203", err)
	}
	// One connection for the lease, one for the probe and, later, Unlock's
	// KILL QUERY.
	c1.Raw(func(any) error { return errBad })
	c1.Close()
	c2.Raw(func(any) error { return errBad })
	c2.Close()
	l := lock(t, fast, db, subj)
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock = %v", err)
	}
}

// TestStarvedPool: a *sql.DB limited to one connection is refused: the
// lease would keep it, and nothing else could use the pool.
func TestStarvedPool(t *testing.T) {
	db := rootDB(t, server)
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), mistakeTimeout)
	defer cancel()
	if _, err := fast.Lock(ctx, db, subject(t)); err == nil || !strings.Contains(err.Error(), "MaxOpenConns 1") {
		t.Fatalf("Lock with MaxOpenConns 1 = %v, want a refusal naming it", err)
	}
}

// TestHeldByThePool: a connection of the pool that already holds the lock
// (code that took it with GET_LOCK through db and gave the connection back)
// is refused with ErrHeld and given back, still holding it.
func TestHeldByThePool(t *testing.T) {
	admin := rootDB(t, server)
	db := rootDB(t, server)
	subj := subject(t)
	c, _ := rawLock(t, db, subj, time.Second)
	id := holder(t, admin, subj)
	c.Close() // back to the pool, holding the lock
	ctx, cancel := context.WithTimeout(context.Background(), mistakeTimeout)
	defer cancel()
	if _, err := fast.Lock(ctx, db, subj); !errors.Is(err, mysqllease.ErrHeld) {
		t.Fatalf("Lock on a pooled session holding the lock = %v, want ErrHeld", err)
	}
	if got := holder(t, admin, subj); got != id {
		t.Fatalf("after the refusal the lock is held by %d, want the pool's session %d still", got, id)
	}
}

// TestSessionDefaults: the DSN's settings and the server's defaults that
// would cut a lease short (a statement timeout shorter than a heartbeat, a
// wait_timeout of 1 s, autocommit off, an ANSI sql_mode, interpolated
// parameters, parsed times) change nothing: Lock sets what the lease needs.
func TestSessionDefaults(t *testing.T) {
	dsn := server.DSN("root", "") + "?interpolateParams=true&parseTime=true" +
		"&max_statement_time=0.05&wait_timeout=1&net_read_timeout=1&autocommit=0" +
		"&sql_mode=" + url.QueryEscape("'ANSI_QUOTES,NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT'")
	db := open(t, dsn)
	admin := rootDB(t, server)
	cfg := mysqllease.Config{ServerTimeout: 3 * time.Second, Heartbeat: 200 * time.Millisecond, Margin: time.Second}
	cfg.Fence = createFence(t, admin)
	l := lock(t, cfg, db, "it's \"quoted\" \\ "+subject(t))
	defer l.Unlock(context.Background())
	time.Sleep(2 * time.Second) // past the DSN's wait_timeout and statement timeout
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("the lease was lost under the DSN's settings: %v", err)
	}
	if l.Token() != 1 {
		t.Fatalf("Token = %d, want 1", l.Token())
	}
}

// TestReplicaRefused: a read-only replica is refused with ErrReplica, 30
// tries, and no lock is taken there.
func TestReplicaRefused(t *testing.T) {
	replica, err := server.StartReplica()
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	db := rootDB(t, replica)
	subj := subject(t)
	for i := range 30 {
		ctx, cancel := context.WithTimeout(context.Background(), mistakeTimeout)
		l, err := fast.Lock(ctx, db, subj)
		cancel()
		if l != nil {
			l.Unlock(context.Background())
		}
		if !errors.Is(err, mysqllease.ErrReplica) {
			t.Fatalf("try %d: Lock on a replica = %v, want ErrReplica", i, err)
		}
		if id := holder(t, db, subj); id != 0 {
			t.Fatalf("try %d: session %d holds the lock on the replica", i, id)
		}
	}
}

// nilCtx is a nil context.Context in a variable, as a caller's bug would
// pass one.
var nilCtx context.Context

// TestNilArguments: a nil context or *sql.DB panics, naming the call.
func TestNilArguments(t *testing.T) {
	db := rootDB(t, server)
	for name, call := range map[string]func(){
		"Lock called with a nil context": func() { mysqllease.Lock(nilCtx, db, "s") },
		"Lock called with a nil *sql.DB": func() { mysqllease.Lock(context.Background(), nil, "s") },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), name) {
					t.Errorf("panic %v, want one naming %q", r, name)
				}
			}()
			call()
		}()
	}
}

// mustExec runs q on db, failing the test on an error.
func mustExec(t testing.TB, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestSmallPool: two Locks at once on a pool of two connections each take
// one, and each probe waits for a second: they fail within the deadline
// rather than wait on each other for ever.
func TestSmallPool(t *testing.T) {
	db := rootDB(t, server)
	db.SetMaxOpenConns(2)
	cfg := mysqllease.Config{ServerTimeout: 2 * time.Second, Heartbeat: 100 * time.Millisecond, Margin: time.Second}
	errs := make(chan error, 2)
	start := make(chan struct{})
	for i := range 2 {
		go func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), mistakeTimeout)
			defer cancel()
			l, err := cfg.Lock(ctx, db, fmt.Sprintf("%s-%d", t.Name(), i))
			if l != nil {
				l.Unlock(context.Background())
			}
			errs <- err
		}()
	}
	close(start)
	for range 2 {
		err := <-errs
		if errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "no second connection") {
			t.Fatalf("a Lock on a pool too small waited for its context: %v", err)
		}
		if err != nil && !strings.Contains(err.Error(), "no second connection of the pool within") {
			t.Fatalf("Lock = %v, want nil or the probe's refusal", err)
		}
	}
}

// TestReadTimeoutUnderHeartbeat: a DSN readTimeout shorter than Heartbeat
// ends the pending heartbeat: the lease is lost with ErrConnLost soon after
// its grant (the README's row says to leave readTimeout 0 or set it above
// Heartbeat).
func TestReadTimeoutUnderHeartbeat(t *testing.T) {
	db := open(t, server.DSN("root", "")+"?readTimeout=50ms")
	l := lock(t, fast, db, subject(t))
	defer l.Unlock(context.Background())
	waitLost(t, l)
	if err := l.Signal().Err(); !errors.Is(err, mysqllease.ErrConnLost) {
		t.Fatalf("Err = %v, want ErrConnLost", err)
	}
}
