package sqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/zukhruf/lease/fencing"
)

func openDB(t testing.TB, name string) (dialect, *sql.DB) {
	t.Helper()
	d := dialects[name]
	db, err := sql.Open(d.driver, d.dsn(addrs[name]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return d, db
}

func resource(t testing.TB) string {
	return fmt.Sprintf("sqltest-%d", time.Now().UnixNano())
}

// A transaction that read before a newer holder raised the fence and
// committed is refused: MariaDB's REPEATABLE READ snapshot does not hide
// the fence from Check's locking read, and PostgreSQL's READ COMMITTED
// statement sees it.
func TestCheckAfterOlderSnapshot(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"Postgres", "MySQL"} {
		t.Run(name, func(t *testing.T) {
			d, db := openDB(t, name)
			r := resource(t)
			if err := d.fence.Advance(ctx, db, r, 3); err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var tok int64
			if err := tx.QueryRowContext(ctx, "SELECT token FROM "+fenceTable+" WHERE resource = "+placeholder(name), r).Scan(&tok); err != nil || tok != 3 {
				t.Fatalf("read the fence in tx = %d, %v, want 3", tok, err)
			}
			if err := d.fence.Advance(ctx, db, r, 9); err != nil { // the next holder, outside tx
				t.Fatal(err)
			}
			err = d.fence.Check(ctx, tx, r, 5)
			var se *fencing.StaleError
			if !errors.As(err, &se) || se.Current != 9 || se.Token != 5 {
				t.Fatalf("Check(5) in a tx whose snapshot saw 3, after 9 was committed = %v, want a *StaleError 5, 9", err)
			}
		})
	}
}

// Under REPEATABLE READ, a transaction whose snapshot is older than the
// fence a newer holder committed is not let through either: MariaDB's
// Check refuses it, PostgreSQL's fails with a serialization error, and
// nothing commits.
func TestCheckRepeatableRead(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"Postgres", "MySQL"} {
		t.Run(name, func(t *testing.T) {
			d, db := openDB(t, name)
			r := resource(t)
			if err := d.fence.Advance(ctx, db, r, 3); err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var tok int64
			if err := tx.QueryRowContext(ctx, "SELECT token FROM "+fenceTable+" WHERE resource = "+placeholder(name), r).Scan(&tok); err != nil || tok != 3 {
				t.Fatalf("read the fence in tx = %d, %v, want 3", tok, err)
			}
			if err := d.fence.Advance(ctx, db, r, 9); err != nil {
				t.Fatal(err)
			}
			err = d.fence.Check(ctx, tx, r, 5)
			if err == nil {
				t.Fatal("Check(5) in a REPEATABLE READ tx whose snapshot saw 3, after 9 was committed = nil, want an error")
			}
			if name == "MySQL" && !errors.Is(err, fencing.ErrStale) {
				t.Errorf("Check(5) = %v, want stale", err)
			}
			if err := tx.Commit(); err == nil {
				var cur int64
				_ = db.QueryRowContext(ctx, "SELECT token FROM "+fenceTable+" WHERE resource = "+placeholder(name), r).Scan(&cur)
				if cur != 9 {
					t.Errorf("the fence after the refused tx committed = %d, want 9", cur)
				}
			}
		})
	}
}

// A writer whose transaction rolls back leaves the fence where it was.
func TestRollbackLeavesFence(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"Postgres", "MySQL"} {
		t.Run(name, func(t *testing.T) {
			d, db := openDB(t, name)
			r := resource(t)
			if err := d.fence.Advance(ctx, db, r, 2); err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.fence.Check(ctx, tx, r, 8); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := d.fence.Advance(ctx, db, r, 4); err != nil {
				t.Errorf("Advance(4) after a rolled-back Check(8) = %v, want nil", err)
			}
		})
	}
}

// A newer holder's Check waits for the older holder's transaction, which
// holds the fence's row: the older one's writes commit first, then the
// newer one's.
func TestCheckWaitsForOlderTransaction(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"Postgres", "MySQL"} {
		t.Run(name, func(t *testing.T) {
			d, db := openDB(t, name)
			r := resource(t)
			if err := d.fence.Advance(ctx, db, r, 1); err != nil {
				t.Fatal(err)
			}
			older, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer older.Rollback()
			if err := d.fence.Check(ctx, older, r, 1); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- d.fence.Advance(ctx, db, r, 2) }()
			select {
			case err := <-done:
				t.Fatalf("the newer Advance(2) returned while the older tx held the fence: %v", err)
			case <-time.After(100 * time.Millisecond): // a guard: waiting longer proves no more
			}
			if err := older.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the newer Advance(2) after the older commit = %v, want nil", err)
			}
		})
	}
}

func placeholder(name string) string {
	if name == "Postgres" {
		return "$1"
	}
	return "?"
}

// BenchmarkWrite is one register's write in a transaction, unfenced and
// fenced (the fence's Check before it), on each server.
func BenchmarkWrite(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"Postgres", "MySQL"} {
		for _, fenced := range []bool{false, true} {
			sub := name + "/unfenced"
			if fenced {
				sub = name + "/fenced"
			}
			b.Run(sub, func(b *testing.B) {
				d, db := openDB(b, name)
				r := resource(b)
				var tok int64
				b.ReportAllocs()
				for b.Loop() {
					tok++
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if fenced {
						if err := d.fence.Check(ctx, tx, r, tok); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := tx.ExecContext(ctx, d.upsert, r, "row", tok); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// questions returns the statements the server has run for conn's session
// (MariaDB's and MySQL's Questions, which counts the statement that reads
// it too).
func questions(t *testing.T, ctx context.Context, tx *sql.Tx) int64 {
	t.Helper()
	var name string
	var n int64
	if err := tx.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// On MariaDB, Check costs the server as many statements as one upsert of
// the caller's, whatever it answers: the fenced write is one statement more
// than the unfenced one.
func TestCheckMySQLOneStatement(t *testing.T) {
	ctx := context.Background()
	d, db := openDB(t, "MySQL")
	r := resource(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	before := questions(t, ctx, tx)
	if _, err := tx.ExecContext(ctx, d.upsert, r+"-data", "row", 1); err != nil {
		t.Fatal(err)
	}
	upsert := questions(t, ctx, tx) - before
	for _, c := range []struct {
		name  string
		token int64
		stale bool
	}{{"insert", 5, false}, {"equal", 5, false}, {"raise", 7, false}, {"refusal", 6, true}} {
		before := questions(t, ctx, tx)
		err := d.fence.Check(ctx, tx, r, c.token)
		if got := errors.Is(err, fencing.ErrStale); got != c.stale || err != nil && !c.stale {
			t.Fatalf("%s: Check(%d) = %v, want stale %v", c.name, c.token, err, c.stale)
		}
		if n := questions(t, ctx, tx) - before; n != upsert {
			t.Errorf("%s: Check ran %d statements, one upsert %d (each count with the read of the count)", c.name, n-1, upsert-1)
		}
	}
}

// The driver's clientFoundRows changes the affected-rows count of an
// unchanged row from 0 to 1, the count of an insert: Check does not read
// it. Negative tokens, which LAST_INSERT_ID holds unsigned, compare as
// numbers.
func TestCheckMySQLClientFoundRows(t *testing.T) {
	ctx := context.Background()
	for _, found := range []bool{false, true} {
		t.Run(fmt.Sprintf("clientFoundRows=%v", found), func(t *testing.T) {
			d := dialects["MySQL"]
			c, err := mysql.ParseDSN(d.dsn(addrs["MySQL"]))
			if err != nil {
				t.Fatal(err)
			}
			c.ClientFoundRows = found
			db, err := sql.Open("mysql", c.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			r := resource(t)
			for _, s := range []struct {
				token   int64
				current int64 // the refusal's, 0 for an accepted write
			}{{-9, 0}, {-9, 0}, {-12, -9}, {-3, 0}, {5, 0}, {5, 0}, {4, 5}, {1 << 62, 0}, {1<<62 - 1, 1 << 62}} {
				err := d.fence.Advance(ctx, db, r, s.token)
				var se *fencing.StaleError
				switch {
				case s.current == 0 && err != nil:
					t.Fatalf("Advance(%d) = %v, want nil", s.token, err)
				case s.current != 0 && (!errors.As(err, &se) || se.Current != s.current || se.Token != s.token):
					t.Fatalf("Advance(%d) = %v, want a *StaleError %d, %d", s.token, err, s.token, s.current)
				}
			}
		})
	}
}
