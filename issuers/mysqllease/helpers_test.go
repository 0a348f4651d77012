package mysqllease_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/zukhruf/lease/issuers/mysqllease"
	"github.com/zukhruf/lease/issuers/mysqllease/internal/mysqltest"
)

// waitTimeout bounds the waits of the tests; it guards against a hang, it is
// not a measure.
const waitTimeout = 60 * time.Second

// fast is the configuration of most tests: a loss by silence within a
// second, and a server that drops a silent session after two.
var fast = mysqllease.Config{ServerTimeout: 2 * time.Second, Heartbeat: 100 * time.Millisecond, Margin: time.Second}

func init() {
	// The driver logs the end of a connection that the tests cause on
	// purpose.
	mysql.SetLogger(mysql.Logger(quietLogger{}))
}

type quietLogger struct{}

func (quietLogger) Print(...any) {}

// open returns a pool of connections to dsn, closed at the end of the test.
func open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// rootDB returns a pool of root's connections to s.
func rootDB(t testing.TB, s *mysqltest.Server) *sql.DB { return open(t, s.DSN("root", "")) }

var subjects atomic.Int64

// subject returns a subject no other test uses.
func subject(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("%.40s-%d", name, subjects.Add(1))
}

// lock takes the lease of subj from db with cfg, failing the test on an
// error.
func lock(t testing.TB, cfg mysqllease.Config, db *sql.DB, subj string) *mysqllease.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	l, err := cfg.Lock(ctx, db, subj)
	if err != nil {
		t.Fatalf("Lock(%q) = %v", subj, err)
	}
	return l
}

// granted is the outcome of a Lock run in the background.
type granted struct {
	lease *mysqllease.Lease
	err   error
	at    time.Time // when Lock returned
}

// lockAsync starts Lock in a goroutine and returns once a session of the
// server waits for the lock named name.
func lockAsync(t testing.TB, admin *sql.DB, cfg mysqllease.Config, db *sql.DB, subj string) <-chan granted {
	t.Helper()
	ch := make(chan granted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		l, err := cfg.Lock(ctx, db, subj)
		ch <- granted{l, err, time.Now()}
	}()
	name, _ := cfg.LockName(subj)
	waitWaiting(t, admin, name, ch)
	return ch
}

// waitWaiting returns once a session waits in GET_LOCK for the lock name,
// and fails the test if the Lock that should wait returns on ch first.
func waitWaiting(t testing.TB, admin *sql.DB, name string, ch <-chan granted) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		if waiters(t, admin, name) > 0 {
			return
		}
		select {
		case g := <-ch:
			if g.lease != nil {
				g.lease.Unlock(context.Background())
			}
			t.Fatalf("Lock returned (%v) before it waited for the lock %q", g.err, name)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waits for the lock %q after %v", name, waitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// getLockSQL is GET_LOCK(name, timeout) as the lease sends it, the name in
// hex, so that waiters finds it in the process list.
func getLockSQL(name string, timeout time.Duration) string {
	return fmt.Sprintf("SELECT GET_LOCK(CONVERT(X'%x' USING utf8mb4), %g)", name, timeout.Seconds())
}

// waiters returns how many sessions run a GET_LOCK of the lock name.
func waiters(t testing.TB, admin *sql.DB, name string) int {
	t.Helper()
	var n int
	err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('SELECT GET_LOCK(CONVERT(X''', HEX(?), '''%')", name).Scan(&n)
	if err != nil {
		t.Fatalf("read the process list: %v", err)
	}
	return n
}

// holder returns the session that holds the lock name, 0 if none.
func holder(t testing.TB, admin *sql.DB, name string) int64 {
	t.Helper()
	var id sql.NullInt64
	if err := admin.QueryRow("SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
		t.Fatalf("IS_USED_LOCK: %v", err)
	}
	return id.Int64
}

// waitLost returns once l is lost, failing the test after waitTimeout.
func waitLost(t testing.TB, l *mysqllease.Lease) (at time.Time) {
	t.Helper()
	select {
	case <-l.Signal().Done():
		return time.Now()
	case <-time.After(waitTimeout):
		t.Fatalf("the lease was not lost after %v", waitTimeout)
	}
	return time.Time{}
}

// rawLock takes the lock name in a session of its own with GET_LOCK, as a
// holder that does not use this package does, and returns the connection
// (closed at the end of the test) once the lock is granted.
func rawLock(t testing.TB, db *sql.DB, name string, timeout time.Duration) (*sql.Conn, time.Time) {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatalf("conn: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	var got sql.NullInt64
	if err := c.QueryRowContext(context.Background(), "SELECT GET_LOCK(?, ?)", name, timeout.Seconds()).Scan(&got); err != nil {
		t.Fatalf("GET_LOCK: %v", err)
	}
	at := time.Now()
	if got.Int64 != 1 {
		t.Fatalf("GET_LOCK(%q) = %v, want 1", name, got)
	}
	return c, at
}

// sessionOf returns the server session id of the lease l: the holder of its
// lock.
func sessionOf(t testing.TB, admin *sql.DB, l *mysqllease.Lease) int64 {
	t.Helper()
	id := holder(t, admin, l.Name())
	if id == 0 {
		t.Fatalf("no session holds the lock %q of a live lease", l.Name())
	}
	return id
}
