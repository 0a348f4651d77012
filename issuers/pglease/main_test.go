package pglease_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

// server is the PostgreSQL server the tests share; the tests that stop a
// server start their own.
var server *pgtest.Server

// TestMain starts the shared server and stops it after the tests. Every test
// closes its connections, and every lease stops its goroutines at the loss
// or the release: nothing may be left running afterwards, in this package or
// in pgx.
func TestMain(m *testing.M) {
	if os.Getenv(childAddr) != "" {
		os.Exit(child()) // a process of TestPoolerTransactionRefused
	}
	if os.Getenv(waiterAddr) != "" {
		os.Exit(waiterChild()) // another process's waiter (startProcessWaiter)
	}
	var err error
	server, err = pgtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // a missing binary fails the tests, naming the package to install
		os.Exit(1)
	}
	code := m.Run()
	pglease.CloseIdleSessions()
	if err := server.Close(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}
