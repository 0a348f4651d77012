package sqltest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/zukhruf/lease/fencingtest"
)

func createDatabase(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+database)
	return err
}

func harness(name string) fencingtest.Harness {
	return fencingtest.Harness{Addr: addrs[name], Open: dialects[name].open}
}

// TestConformance runs fencingtest on the SQL fence, on PostgreSQL and on
// MariaDB.
func TestConformance(t *testing.T) {
	for _, name := range []string{"Postgres", "MySQL"} {
		t.Run(name, func(t *testing.T) { fencingtest.Run(t, harness(name)) })
	}
}

// TestNegativeControls runs fencingtest's fences built wrong on each
// server: each must fail the suite.
func TestNegativeControls(t *testing.T) {
	for _, name := range []string{"Postgres", "MySQL"} {
		t.Run(name, func(t *testing.T) { fencingtest.RunNegativeControls(t, harness(name)) })
	}
}
