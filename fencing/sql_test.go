package fencing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/zukhruf/lease/fencing"
)

func TestSQLDDL(t *testing.T) {
	for _, c := range []struct {
		f    fencing.SQL
		want string
	}{
		{fencing.SQL{Table: "fences", Dialect: fencing.Postgres}, `CREATE TABLE IF NOT EXISTS "fences" (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL)`},
		{fencing.SQL{Table: "app.fences", Dialect: fencing.Postgres}, `CREATE TABLE IF NOT EXISTS "app"."fences" (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL)`},
		{fencing.SQL{Table: "fences", Dialect: fencing.MySQL}, "CREATE TABLE IF NOT EXISTS `fences` (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL)"},
	} {
		got, err := c.f.DDL()
		if err != nil || got != c.want {
			t.Errorf("%+v.DDL() = %q, %v, want %q", c.f, got, err, c.want)
		}
	}
}

// Mistakes fail at once, naming the field, before any use of the
// transaction or the database.
func TestSQLMistakes(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		f        fencing.SQL
		resource string
		want     string
	}{
		{"zero SQL", fencing.SQL{}, "r", "SQL.Table"},
		{"no dialect", fencing.SQL{Table: "fences"}, "r", "SQL.Dialect"},
		{"a table with a quote", fencing.SQL{Table: `f"; DROP TABLE x; --`, Dialect: fencing.Postgres}, "r", "SQL.Table"},
		{"empty resource", fencing.SQL{Table: "fences", Dialect: fencing.MySQL}, "", "want 1 to 255 bytes"},
		{"long resource", fencing.SQL{Table: "fences", Dialect: fencing.Postgres}, strings.Repeat("x", 256), "want 1 to 255 bytes"},
		{"nil tx", fencing.SQL{Table: "fences", Dialect: fencing.Postgres}, "r", "nil *sql.Tx"},
	} {
		err := c.f.Check(ctx, nil, c.resource, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "fencing: ") {
			t.Errorf("%s: Check() = %v, want an error naming %q", c.name, err, c.want)
		}
		if c.name == "nil tx" {
			if err := c.f.Advance(ctx, nil, c.resource, 1); err == nil || !strings.Contains(err.Error(), "nil *sql.DB") {
				t.Errorf("Advance(nil db) = %v, want an error naming the nil *sql.DB", err)
			}
			continue
		}
		if c.name == "empty resource" || c.name == "long resource" {
			continue
		}
		if err := c.f.Advance(ctx, nil, c.resource, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Advance() = %v, want an error naming %q", c.name, err, c.want)
		}
		if _, err := c.f.DDL(); err == nil {
			t.Errorf("%s: DDL() = nil error", c.name)
		}
	}
	if got := fencing.Dialect(7).String(); got != "Dialect(7)" {
		t.Errorf("String() = %q", got)
	}
}
