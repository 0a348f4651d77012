package sqltest_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/fencingtest"
	"github.com/zukhruf/lease/internal/testservers/mysqlserver"
	"github.com/zukhruf/lease/internal/testservers/pgserver"
)

// addrs are the servers' addresses by dialect, empty in a child process of
// fencingtest, which is passed the parent's.
var addrs = map[string]string{}

// TestMain starts a PostgreSQL and a MariaDB server, creates the tables,
// and stops the servers after the tests; then no goroutine may be left.
func TestMain(m *testing.M) {
	if fencingtest.Child() {
		os.Exit(m.Run())
	}
	code := run(m)
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	pg, err := pgserver.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // a missing binary fails the tests, naming the package to install
		return 1
	}
	defer pg.Close()
	my, err := mysqlserver.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer my.Close()
	ctx := context.Background()
	if err := createDatabase(ctx, my.DSN("root", "")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	addrs["Postgres"], addrs["MySQL"] = pg.Addr(), my.Addr()
	for name, d := range dialects {
		if err := d.setup(ctx, addrs[name]); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			return 1
		}
	}
	return m.Run()
}
