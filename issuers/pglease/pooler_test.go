package pglease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

// startBouncer starts a PgBouncer in front of the shared server, closed at
// the end of the test.
func startBouncer(t *testing.T, mode string, poolSize int) *pgtest.Bouncer {
	t.Helper()
	b, err := server.StartBouncer(mode, poolSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// forms are the ways to call Lock that the pooler tests go through, by name.
var forms = []struct {
	name string
	lock func(ctx context.Context, pool *pgxpool.Pool, subject string) (*pglease.Lease, error)
}{
	{"Lock", pglease.Lock},
	{"Config{}.Lock", pglease.Config{}.Lock},
	{"Config{timing}.Lock", fast.Lock},
	{"Config{Secret}.Lock", pglease.Config{Secret: []byte("s")}.Lock},
	{"Config{Fence}.Lock", pglease.Config{Fence: []string{"pooled_tokens"}}.Lock},
}

// The environment of a child process of TestPoolerTransactionRefused.
const (
	childAddr = "PGLEASE_CHILD_ADDR" // the address its pool connects through
	childForm = "PGLEASE_CHILD_FORM" // the index of its form of Lock
)

// child is the body of a child process: it takes its pool through the
// address it was given, calls Lock in its form, holds a lease it was
// granted for a while, and prints what happened: "granted", "pooled" or an
// error.
func child() int {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, "postgres://postgres@"+os.Getenv(childAddr)+"/postgres?sslmode=disable")
	if err != nil {
		fmt.Println("error:", err)
		return 0
	}
	defer pool.Close()
	i, _ := strconv.Atoi(os.Getenv(childForm))
	l, err := forms[i].lock(ctx, pool, "two processes")
	switch {
	case errors.Is(err, pglease.ErrPooled):
		fmt.Println("pooled")
	case err != nil:
		fmt.Println("error:", err)
	default:
		fmt.Println("granted")
		time.Sleep(500 * time.Millisecond) // long enough for the other process to be granted too
		l.Unlock(ctx)
	}
	return 0
}

// TestPoolerTransactionRefused has two processes take the same lock through
// PgBouncer in transaction mode, where both would be granted on one shared
// server session, 30 times, each time in one of the forms of Lock: every
// Lock is refused with ErrPooled, and no lease is granted.
func TestPoolerTransactionRefused(t *testing.T) {
	b := startBouncer(t, "transaction", 2)
	admin := connect(t, server, server.Addr())
	if _, err := admin.Exec(context.Background(), "create table pooled_tokens (key bigint primary key, token bigint not null)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "drop table pooled_tokens") })
	const tries = 30
	grantedN, pooledN := 0, 0
	for i := range tries {
		form := i % len(forms)
		var outs [2]bytes.Buffer
		var cmds [2]*exec.Cmd
		for p := range cmds {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childAddr+"="+b.Addr(), childForm+"="+strconv.Itoa(form))
			cmd.Stdout, cmd.Stderr = &outs[p], &outs[p]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds[p] = cmd
		}
		for p, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("try %d, process %d: %v: %s", i, p, err, outs[p].String())
			}
			switch out := strings.TrimSpace(outs[p].String()); out {
			case "pooled":
				pooledN++
			case "granted":
				grantedN++
				t.Errorf("try %d (%s), process %d: granted a lease through a transaction pooler", i, forms[form].name, p)
			default:
				t.Errorf("try %d (%s), process %d: %s, want ErrPooled", i, forms[form].name, p, out)
			}
		}
		if n := keyLocks(t, admin, pglease.Key("two processes")); n != 0 {
			t.Errorf("try %d: %d sessions hold or wait for the lock after both processes ended, want 0", i, n)
		}
	}
	t.Logf("%d tries of two processes through a transaction pooler: %d leases granted, %d refused with ErrPooled", tries, grantedN, pooledN)
}

// TestPoolerRefusedBeforeAnyLock: a Lock through a transaction pooler while
// a direct session holds the lock returns ErrPooled at once, where a Lock
// that waited would not return; and it changed nothing in the server
// session it reached: that session's idle_session_timeout is still the
// server's.
func TestPoolerRefusedBeforeAnyLock(t *testing.T) {
	b := startBouncer(t, "transaction", 1)
	admin := connect(t, server, server.Addr())
	key := pglease.Key("held directly")
	if _, err := admin.Exec(context.Background(), "select pg_advisory_lock($1::bigint)", key); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), "select pg_advisory_unlock($1::bigint)", key)
	pool := newPool(t, server, b.Addr())
	for _, f := range forms[:4] {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		l, err := f.lock(ctx, pool, "held directly")
		cancel()
		if !errors.Is(err, pglease.ErrPooled) || !strings.Contains(err.Error(), "pg_backend_pid()") {
			if l != nil {
				unlock(t, l)
			}
			t.Errorf("%s through a transaction pooler = %v, want ErrPooled", f.name, err)
		}
	}
	var timeout string
	if err := pool.QueryRow(context.Background(), "show idle_session_timeout", pgx.QueryExecModeSimpleProtocol).Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if timeout != "0" {
		t.Errorf("idle_session_timeout through the pooler = %q after the refusals, want the server's 0", timeout)
	}
	if n := keyLocks(t, admin, key); n != 1 {
		t.Errorf("%d sessions hold or wait for the lock, want the direct holder's 1", n)
	}
}

// TestPoolerSessionMode goes through PgBouncer in session mode: refused
// without Config.SessionPooler; with it, the lease is granted, kept by its
// heartbeats, released; and lost when the server process behind the pooler
// is terminated, after which a direct holder is granted.
func TestPoolerSessionMode(t *testing.T) {
	b := startBouncer(t, "session", 4)
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, b.Addr())
	if _, err := fast.Lock(context.Background(), pool, "session"); !errors.Is(err, pglease.ErrPooled) {
		t.Errorf("Lock through a session pooler without SessionPooler = %v, want ErrPooled", err)
	}
	cfg := fast
	cfg.SessionPooler = true
	l := lock(t, cfg, pool, "session")
	time.Sleep(3 * fast.Deadline)
	if err := l.Signal().Err(); err != nil {
		t.Fatalf("Err() = %v after three deadlines through a session pooler, want nil", err)
	}
	unlock(t, l)
	if n := keyLocks(t, admin, l.Key()); n != 0 {
		t.Errorf("%d sessions hold the lock after Unlock, want 0", n)
	}

	l = lock(t, cfg, pool, "session")
	w := startWaiter(t, server, admin, l.Key())
	terminate(t, admin, holder(t, admin, l.Key()))
	err := waitLost(t, l)
	if !isLost(err, pglease.ErrTerminated) && !isLost(err, pglease.ErrConnLost) {
		t.Errorf("Err() = %v after the server process behind the pooler was terminated, want ErrTerminated or ErrConnLost", err)
	}
	t.Logf("terminated behind the pooler: %v", err)
	if _, granted := w.granted(waitTimeout); !granted {
		t.Errorf("the direct holder was not granted after the terminate")
	}
	w.close(t)
	l.Unlock(context.Background())
}

// TestPoolerStopped freezes PgBouncer (SIGSTOP) while a lease through it in
// session mode holds the lock and a direct holder waits: the lease is lost
// by its deadline, and the direct holder is granted only afterwards, when
// the server's idle_session_timeout ends the silent session behind the
// pooler.
func TestPoolerStopped(t *testing.T) {
	b := startBouncer(t, "session", 4)
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, b.Addr())
	cfg := fast
	cfg.SessionPooler = true
	l := lock(t, cfg, pool, "stopped pooler")
	w := startWaiter(t, server, admin, l.Key())
	pid := b.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	err := waitLost(t, l)
	lostAt := time.Now()
	if !isLost(err, pglease.ErrUnresponsive) {
		t.Errorf("Err() = %v with the pooler stopped, want ErrUnresponsive", err)
	}
	grantAt, granted := w.granted(waitTimeout)
	if !granted {
		t.Fatalf("the direct holder was not granted %v after the pooler stopped", waitTimeout)
	}
	if !grantAt.After(lostAt) {
		t.Errorf("the direct holder was granted %v before the lease through the stopped pooler was lost", lostAt.Sub(grantAt))
	}
	t.Logf("lost %v before the direct holder's grant", grantAt.Sub(lostAt))
	w.close(t)
	syscall.Kill(pid, syscall.SIGCONT)
	l.Unlock(context.Background())
}

// TestLockOutlastsRoleTimeouts takes the lease as a role whose
// statement_timeout and lock_timeout are 300 ms, which end a plain
// pg_advisory_lock that waits longer; Lock waits 2 s for the holder to
// release, as long as its context allows, and is granted.
func TestLockOutlastsRoleTimeouts(t *testing.T) {
	admin := connect(t, server, server.Addr())
	ctx := context.Background()
	for _, q := range []string{
		"create role slow login",
		"alter role slow set statement_timeout = '300ms'",
		"alter role slow set lock_timeout = '300ms'",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec(ctx, "drop role slow") })
	pcfg, err := pgxpool.ParseConfig(server.ConnString(server.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.User = "slow"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	key := pglease.Key("slow role")
	if _, err := admin.Exec(ctx, "select pg_advisory_lock($1::bigint)", key); err != nil {
		t.Fatal(err)
	}
	// The hazard: the role's timeouts end a plain wait.
	if _, err := pool.Exec(ctx, "select pg_advisory_lock($1::bigint)", key); err == nil {
		t.Fatal("a plain pg_advisory_lock as the role was granted while the lock was held")
	} else {
		t.Logf("a plain wait as the role: %v", err)
	}
	const hold = 2 * time.Second
	start := time.Now()
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(hold)
		admin.Exec(ctx, "select pg_advisory_unlock($1::bigint)", key)
	}()
	l := lock(t, fast, pool, "slow role")
	<-released
	if waited := time.Since(start); waited < hold {
		t.Errorf("Lock returned after %v, before the holder released at %v", waited, hold)
	}
	if err := l.Signal().Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	unlock(t, l)
}

// TestLockCutAtProbe cuts, through PgBouncer in session mode with
// SessionPooler set, the context of a Lock before its check that the pooler
// does not share the session: context.Canceled, and no lock or waiter left.
func TestLockCutAtProbe(t *testing.T) {
	b := startBouncer(t, "session", 4)
	admin := connect(t, server, server.Addr())
	cfg := fast
	cfg.SessionPooler = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pglease.SetStepHook(func(_ context.Context, s string) {
		if s == pglease.StepProbe {
			cancel()
		}
	})
	defer pglease.SetStepHook(nil)
	l, err := cfg.Lock(ctx, newPool(t, server, b.Addr()), "cut at the probe")
	if !errors.Is(err, context.Canceled) {
		if l != nil {
			unlock(t, l)
		}
		t.Fatalf("Lock cut before the probe = %v, want context.Canceled", err)
	}
	waitKeyFree(t, admin, cfg.Key("cut at the probe"))
}
