package mysqlserver

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"
)

// TestStartsAtOnce starts servers together, as the packages of one go test
// run do, and checks that a server's start leaves another's temporary
// tables alone. In a shared /tmp a starting mariadbd removes the #sql*
// files it finds there: two mariadb-install-db at once failed 3 times in 8
// with "Unknown table 'mysql.tmp_user_sys'".
func TestStartsAtOnce(t *testing.T) {
	if err := Check(); err != nil {
		t.Fatal(err)
	}
	first, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	db, err := sql.Open("mysql", first.DSN("root", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// An Aria temporary table keeps its files in the server's tmpdir.
	if _, err := conn.ExecContext(ctx, "CREATE TEMPORARY TABLE mysql.kept (v INT) ENGINE=Aria"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO mysql.kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}

	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Start()
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = s.Close()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("server %d of %d started at once: %v", i, n, err)
		}
	}

	var v int
	if err := conn.QueryRowContext(ctx, "SELECT v FROM mysql.kept").Scan(&v); err != nil || v != 7 {
		t.Errorf("the first server's temporary table after %d servers started: %d, %v; want 7", n, v, err)
	}
}
