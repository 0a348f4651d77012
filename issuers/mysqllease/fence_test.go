package mysqllease_test

import (
	"context"
	"database/sql"
	"testing"
)

// createFence creates the database test and a fencing table in it, and
// returns the table's name, test.<name>.
func createFence(t testing.TB, admin *sql.DB) string {
	t.Helper()
	table := "test.fence_" + sanitize(subject(t))
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS test",
		"CREATE TABLE " + table + " (name VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB",
	} {
		if _, err := admin.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return table
}

// sanitize keeps the letters and digits of s, and makes the rest _.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	if len(b) > 50 {
		b = b[len(b)-50:]
	}
	return string(b)
}
