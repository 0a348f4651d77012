package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL's failover mix runs a primary and a streaming standby, on two
// ports the clients know both of (their connection string takes the one
// that accepts writes). A failover stops the primary, fast (its sessions
// are told, and it sends the standby all its WAL) or by SIGKILL, and
// promotes the standby at once, as failover tools do: the old primary is stopped
// first, never promoted beside (pglease's README: a split brain only the
// token covers). Replication is synchronous, so a token committed on the
// primary is on the standby. Once the fault ends, a new standby is made
// on the old primary's port from a base backup of the new primary.
const (
	FailoverFast = "failover-fast"
	FailoverKill = "failover-kill"
)

// pgPair is the primary and standby of the failover mix.
type pgPair struct {
	cred    *syscall.Credential
	ports   [2]int
	procs   [2]*proc // under runner.mu
	primary int      // the index of the primary; under runner.serverFaults
}

// startPGPair starts the primary and its standby, and returns both
// addresses, the primary's first.
func (r *runner) startPGPair() (string, error) {
	bin := pgBin()
	if _, err := os.Stat(filepath.Join(bin, "pg_basebackup")); err != nil {
		return "", fmt.Errorf("%s/pg_basebackup not found (set PGBIN to its folder): install the Debian package postgresql (make pg-deps): %w", bin, err)
	}
	cred, err := pgCredential()
	if err != nil {
		return "", err
	}
	if err := r.pgInit(cred); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(r.serverDir, "data"), filepath.Join(r.serverDir, "data0")); err != nil {
		return "", err
	}
	pair := &pgPair{cred: cred}
	r.pg = pair
	for i := range pair.ports {
		if pair.ports[i], err = freePort(); err != nil {
			return "", err
		}
	}
	// The schema first, before commits wait for a standby; the setting
	// is in the data, which the base backups copy to each standby.
	if err := r.pgStart(0, "data0", true); err != nil {
		return "", err
	}
	if err := pgExec(r.pgAddr(0), "ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"); err != nil {
		return "", err
	}
	if err := r.pgStandby(1); err != nil {
		return "", err
	}
	return r.pgAddr(0) + "," + r.pgAddr(1), nil
}

func (r *runner) pgAddr(i int) string { return "127.0.0.1:" + strconv.Itoa(r.pg.ports[i]) }

// pgStart starts the server i on the data in folder data, and waits until
// it takes a statement (and, if first, makes the token tables).
func (r *runner) pgStart(i int, data string, first bool) error {
	cmd, err := r.pgPostgres(r.pg.cred, data, r.pg.ports[i])
	if err != nil {
		return err
	}
	err = cmd.Start()
	// The log file is the child's once started.
	if f, ok := cmd.Stdout.(*os.File); ok {
		f.Close()
	}
	if err != nil {
		return err
	}
	p := &proc{name: fmt.Sprintf("postgres-%d", i), cmd: cmd, done: make(chan struct{}), children: true}
	go func() { cmd.Wait(); close(p.done) }()
	r.mu.Lock()
	r.pg.procs[i] = p
	if i == r.pg.primary {
		r.server = p
	}
	r.mu.Unlock()
	if err := pgReady(r.pgAddr(i), first, p.done); err != nil {
		p.signal(syscall.SIGKILL)
		return err
	}
	return nil
}

// pgStandby makes server i a standby of the primary: a base backup of it
// into data<i>, with the primary's address to stream from (-R), started.
func (r *runner) pgStandby(i int) error {
	data := "data" + strconv.Itoa(i)
	os.RemoveAll(filepath.Join(r.serverDir, data))
	from := r.pg.ports[r.pg.primary]
	out, err := pgCommand(r.pg.cred, "pg_basebackup", "-D", filepath.Join(r.serverDir, data), "-R", "-X", "stream",
		"-h", "127.0.0.1", "-p", strconv.Itoa(from), "-U", "postgres", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_basebackup: %w: %s", err, out)
	}
	return r.pgStart(i, data, false)
}

// pgFailover stops the primary (fast, or by SIGKILL) and promotes the
// standby; it returns the old primary's address and the heal, which makes
// the old primary's port a standby of the new one.
func (r *runner) pgFailover(kind string) (string, func(), error) {
	pair := r.pg
	old := pair.primary
	r.mu.Lock()
	p := pair.procs[old]
	r.mu.Unlock()
	if kind == FailoverFast {
		// To the postmaster alone: SIGINT is its fast shutdown.
		syscall.Kill(p.cmd.Process.Pid, syscall.SIGINT)
	} else {
		p.signal(syscall.SIGKILL)
	}
	<-p.done
	next := 1 - old
	if out, err := pgCommand(pair.cred, "pg_ctl", "promote", "-w", "-t", "60", "-D", filepath.Join(r.serverDir, "data"+strconv.Itoa(next))).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("pg_ctl promote: %w: %s", err, out)
	}
	if err := pgWritable(r.pgAddr(next)); err != nil {
		return "", nil, err
	}
	r.mu.Lock()
	pair.primary = next
	r.server = pair.procs[next]
	r.mu.Unlock()
	return r.pgAddr(old), func() {
		if err := r.pgStandby(old); err != nil {
			fmt.Println("lockset: a new standby:", err)
		}
	}, nil
}

// pgExec runs statements on the server at addr, each on its own.
func pgExec(addr string, statements ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgConnString(addr))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	for _, st := range statements {
		if _, err := c.Exec(ctx, st); err != nil {
			return fmt.Errorf("%s: %w", st, err)
		}
	}
	return nil
}

// pgWritable waits until the server at addr is out of recovery.
func pgWritable(addr string) error {
	return waitServing("the promoted standby", 60*time.Second, nil, func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, pgConnString(addr))
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		var recovering bool
		if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil {
			return err
		}
		if recovering {
			return errors.New("still in recovery")
		}
		return nil
	})
}

// servers returns the pair's processes.
func (pair *pgPair) servers() []*proc {
	var ps []*proc
	for _, p := range pair.procs {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}
