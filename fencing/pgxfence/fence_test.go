package pgxfence_test

import (
	"context"
	"strings"
	"testing"

	"github.com/zukhruf/lease/fencing/pgxfence"
)

// Mistakes fail at once, naming the field, before any use of the
// transaction or the database; the tests on a real server are in
// fencing/internal/sqltest.
func TestMistakes(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		f        pgxfence.Fence
		resource string
		want     string
	}{
		{"zero Fence", pgxfence.Fence{}, "r", "Fence.Table"},
		{"a table with a quote", pgxfence.Fence{Table: `f"; DROP TABLE x; --`}, "r", "Fence.Table"},
		{"empty resource", pgxfence.Fence{Table: "fences"}, "", "want 1 to 255 bytes"},
		{"nil tx", pgxfence.Fence{Table: "fences"}, "r", "nil pgx.Tx"},
	} {
		err := c.f.Check(ctx, nil, c.resource, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "pgxfence: ") {
			t.Errorf("%s: Check() = %v, want an error naming %q", c.name, err, c.want)
		}
	}
	if err := (pgxfence.Fence{Table: "fences"}).Advance(ctx, nil, "r", 1); err == nil || !strings.Contains(err.Error(), "nil Beginner") {
		t.Errorf("Advance(nil) = %v, want an error naming the nil Beginner", err)
	}
	if ddl, err := (pgxfence.Fence{Table: "app.fences"}).DDL(); err != nil || !strings.Contains(ddl, `"app"."fences"`) {
		t.Errorf("DDL() = %q, %v", ddl, err)
	}
}
