package pglease_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/zukhruf/lease/issuers/pglease"
	"github.com/zukhruf/lease/issuers/pglease/internal/pgtest"
)

var cycleCost = flag.Bool("pg.cycle", false, "run the measures of the lock cycle's cost (TestLockCycleCPU, TestLockCycleFenced)")

// procCPU returns the CPU time, user and system, of the process pid.
func procCPU(t *testing.T, pid uint32) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// selfCPU returns the CPU time, user and system, of this process.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestLockCycleCPU: the CPU time a Lock→Unlock cycle of a free subject
// costs the server's backend (its utime + stime in /proc) and this process
// (getrusage), and its wall time, for pglease and for pg_advisory_lock and
// pg_advisory_unlock by hand on a pooled connection; 5,000 cycles a figure,
// three rounds: go test -run TestLockCycleCPU -pg.cycle -v (the README's
// lock cycle).
func TestLockCycleCPU(t *testing.T) {
	if !*cycleCost {
		t.Skip("the cost of the lock cycle: -pg.cycle")
	}
	const n = 5000
	ctx := context.Background()
	admin := connect(t, server, server.Addr())
	pool := newPool(t, server, server.Addr())
	for round := range 3 {
		// floor
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pid := c.Conn().PgConn().PID()
		c.Release()
		b0, c0, w0 := procCPU(t, pid), selfCPU(), time.Now()
		for i := range n {
			key := pglease.Key(fmt.Sprintf("cpu-f-%d-%d", round, i))
			c, _ := pool.Acquire(ctx)
			c.Exec(ctx, "select pg_advisory_lock($1)", key)
			c.QueryRow(ctx, "select pg_advisory_unlock($1)", key).Scan(new(bool))
			c.Release()
		}
		t.Logf("floor:   backend %v/cycle, client %v/cycle, wall %v/cycle", (procCPU(t, pid)-b0)/n, (selfCPU()-c0)/n, time.Since(w0)/n)
		l := lock(t, pglease.Config{}, pool, "cpu-probe")
		pid = holder(t, admin, l.Key())
		unlock(t, l)
		b0, c0, w0 = procCPU(t, pid), selfCPU(), time.Now()
		for i := range n {
			l, err := pglease.Lock(ctx, pool, fmt.Sprintf("cpu-p-%d-%d", round, i))
			if err != nil {
				t.Fatal(err)
			}
			l.Unlock(ctx)
		}
		t.Logf("pglease: backend %v/cycle, client %v/cycle, wall %v/cycle", (procCPU(t, pid)-b0)/n, (selfCPU()-c0)/n, time.Since(w0)/n)
	}
}

// TestLockCycleFenced: the p50 of a Lock→Unlock cycle with and without a
// fencing token, beside pg_advisory_lock by hand without and with the same
// token's increment (three statements), on a server with fsync off (the
// tests') and one with fsync and synchronous_commit on, where the token's
// commit flushes the WAL: go test -run TestLockCycleFenced -pg.cycle -v.
func TestLockCycleFenced(t *testing.T) {
	if !*cycleCost {
		t.Skip("the cost of the lock cycle: -pg.cycle")
	}
	for _, durable := range []bool{false, true} {
		var s *pgtest.Server
		var err error
		if durable {
			s, err = pgtest.StartWith("fsync=on", "synchronous_commit=on", "full_page_writes=on")
		} else {
			s, err = pgtest.Start()
		}
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		admin := connect(t, s, s.Addr())
		if _, err := admin.Exec(ctx, "create table cycle_tokens (key bigint primary key, token bigint not null)"); err != nil {
			t.Fatal(err)
		}
		pool := newPool(t, s, s.Addr())
		fenced := pglease.Config{Fence: pgx.Identifier{"cycle_tokens"}}
		const n = 1500
		med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
		run := map[string]func(i int) error{
			"floor": func(i int) error {
				key := pglease.Key(fmt.Sprintf("f-%d", i))
				c, _ := pool.Acquire(ctx)
				defer c.Release()
				c.Exec(ctx, "select pg_advisory_lock($1)", key)
				return c.QueryRow(ctx, "select pg_advisory_unlock($1)", key).Scan(new(bool))
			},
			"floor+token": func(i int) error {
				key := pglease.Key(fmt.Sprintf("ft-%d", i%50))
				c, _ := pool.Acquire(ctx)
				defer c.Release()
				c.Exec(ctx, "select pg_advisory_lock($1)", key)
				var tok int64
				if err := c.QueryRow(ctx, "insert into cycle_tokens as t (key, token) values ($1, 1) on conflict (key) do update set token = t.token + 1 returning t.token", key).Scan(&tok); err != nil {
					return err
				}
				return c.QueryRow(ctx, "select pg_advisory_unlock($1)", key).Scan(new(bool))
			},
			"pglease": func(i int) error {
				l, err := pglease.Lock(ctx, pool, fmt.Sprintf("p-%d", i))
				if err != nil {
					return err
				}
				return l.Unlock(ctx)
			},
			"pglease+fence": func(i int) error {
				l, err := fenced.Lock(ctx, pool, fmt.Sprintf("pf-%d", i%50))
				if err != nil {
					return err
				}
				return l.Unlock(ctx)
			},
		}
		samples := map[string][]time.Duration{}
		for round := range 3 {
			for _, name := range []string{"floor", "floor+token", "pglease", "pglease+fence"} {
				for i := range n {
					st := time.Now()
					if err := run[name](round*n + i); err != nil {
						t.Fatal(name, err)
					}
					samples[name] = append(samples[name], time.Since(st))
				}
			}
		}
		for _, name := range []string{"floor", "floor+token", "pglease", "pglease+fence"} {
			t.Logf("durable %v: %s p50 %v", durable, name, med(samples[name]))
		}
		pglease.CloseIdleSessions()
	}
}
