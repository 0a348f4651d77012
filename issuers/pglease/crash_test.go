package pglease_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

// TestLostWhenBackendsCrash kills backends with SIGKILL on a server of its
// own: the postmaster then ends every other backend and restarts. A lease
// whose own backend is killed sees the connection end with no word
// (ErrConnLost); a lease whose backend is ended because another crashed is
// told (ErrShutdown, SQLSTATE 57P02), unless its best-effort warning did
// not get out.
func TestLostWhenBackendsCrash(t *testing.T) {
	s, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	admin, pool := connect(t, s, s.Addr()), newPool(t, s, s.Addr())
	lOwn := lock(t, fast, pool, "own backend killed")
	lOther := lock(t, fast, pool, "another backend killed")
	if err := syscall.Kill(int(holder(t, admin, lOwn.Key())), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := waitLost(t, lOwn); !isLost(err, pglease.ErrConnLost) {
		t.Errorf("own backend killed: Err() = %v, want ErrConnLost", err)
	}
	// The backend's warning is best effort: the connection may just end.
	if err := waitLost(t, lOther); !isLost(err, pglease.ErrShutdown) && !isLost(err, pglease.ErrConnLost) {
		t.Errorf("another backend killed: Err() = %v, want ErrShutdown (or ErrConnLost)", err)
	} else {
		t.Logf("another backend killed: %v", err)
	}
	lOwn.Unlock(context.Background())
	lOther.Unlock(context.Background())
}

// TestLockThroughUnixSocket takes and releases a lease over a Unix-domain
// socket, where the TCP timeouts do not apply: idle_session_timeout alone
// bounds the server's drop of a silent session.
func TestLockThroughUnixSocket(t *testing.T) {
	admin := connect(t, server, server.Addr())
	l := lock(t, fast, newPool(t, server, server.Socket()), "over a socket")
	unlock(t, l)
	if n := keyLocks(t, admin, l.Key()); n != 0 {
		t.Errorf("%d sessions hold the lock after Unlock, want 0", n)
	}
}

// TestSmartShutdownWaits starts a smart shutdown while a lease is held: the
// server waits for the sessions to end and frees nothing, so the lease stays
// live through several deadlines; once it is released and its connection
// closed with its session, the shutdown completes.
func TestSmartShutdownWaits(t *testing.T) {
	s, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pool := newPool(t, s, s.Addr())
	l := lock(t, fast, pool, "smart")
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop("smart") }()
	time.Sleep(3 * fast.Deadline)
	if err := l.Signal().Err(); err != nil {
		t.Errorf("Err() = %v during a smart shutdown, want nil", err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("the smart shutdown ended (%v) while the lease's session lived", err)
	default:
	}
	unlock(t, l)
	pool.Close()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
