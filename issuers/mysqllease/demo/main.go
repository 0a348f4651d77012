// Command demo shows two holders contending for one MySQL/MariaDB GET_LOCK
// lock.
//
// It starts a real MariaDB server (the Debian package mariadb-server) on a
// loopback port, with its data in a temporary folder. Holder A takes the
// lock with a fencing token and writes batches to a table, each write
// guarded by its token; holder B waits for the lock. An operator kills A's
// session with KILL CONNECTION: A's signal is lost with its cause at once,
// B gets the lock with a larger token and goes on, and a late retry of A's,
// with its old token, is refused by the table's guard. The demo prints the
// timeline and removes everything it made.
//
// Run it with `make demo-mysql`, or `go run ./demo` in this module.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/zukhruf/lease/issuers/mysqllease"
	"github.com/zukhruf/lease/issuers/mysqllease/internal/mysqltest"
)

const (
	subject = "orders"
	// pause is how long a holder rests between batches; the loss ends the
	// rest early.
	pause = 100 * time.Millisecond
	// bound guards the demo's waits against a hang.
	bound = 30 * time.Second
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// timeline prints events with the time since the demo began.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (tl *timeline) say(who, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	ms := time.Since(tl.start).Milliseconds()
	fmt.Fprintf(tl.out, "%6d ms  %-9s %s\n", ms, who, fmt.Sprintf(format, args...))
}

// The table the holders write, each write guarded by the writer's token:
// a write whose token is lower than the row's was refused.
const (
	schema = `CREATE DATABASE demo;
CREATE TABLE demo.fence (name VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB;
CREATE TABLE demo.orders (id INT PRIMARY KEY, batch INT NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB;
INSERT INTO demo.orders VALUES (1, 0, 0)`
	guardedWrite = "UPDATE demo.orders SET batch = ?, token = ? WHERE id = 1 AND token <= ?"
)

func run(out io.Writer) error {
	mysql.SetLogger(mysql.Logger(quiet{})) // the driver logs the killed connection
	tl := &timeline{out: out, start: time.Now()}
	server, err := mysqltest.Start()
	if err != nil {
		return err
	}
	defer server.Close()
	tl.say("server", "MariaDB on %s", server.Addr())
	db, err := sql.Open("mysql", server.DSN("root", "")+"?multiStatements=true")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(schema); err != nil {
		return err
	}
	cfg := mysqllease.Config{ServerTimeout: 4 * time.Second, Heartbeat: 250 * time.Millisecond, Margin: 2 * time.Second, Fence: "demo.fence"}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()

	a, err := cfg.Lock(ctx, db, subject)
	if err != nil {
		return err
	}
	tl.say("holder A", "locked %q, fencing token %d", subject, a.Token())

	// B waits in a pool of its own, as another process would.
	dbB, err := sql.Open("mysql", server.DSN("root", ""))
	if err != nil {
		return err
	}
	defer dbB.Close()
	type grant struct {
		l   *mysqllease.Lease
		err error
	}
	bGranted := make(chan grant, 1)
	go func() {
		l, err := cfg.Lock(ctx, dbB, subject)
		bGranted <- grant{l, err}
	}()
	tl.say("holder B", "waits for %q", subject)

	// A writes batches until its signal is lost.
	aStopped := make(chan int, 1)
	go func() {
		sig := a.Signal()
		batch := 0
		for {
			if err := sig.Err(); err != nil {
				tl.say("holder A", "told before batch %d: %v", batch+1, err)
				tl.say("holder A", "errors.Is(err, mysqllease.ErrConnLost) = %v", errors.Is(err, mysqllease.ErrConnLost))
				aStopped <- batch + 1
				return
			}
			batch++
			res, err := db.ExecContext(context.Background(), guardedWrite, batch, a.Token(), a.Token())
			if err == nil {
				n, _ := res.RowsAffected()
				tl.say("holder A", "batch %d stored with fencing token %d: %v", batch, a.Token(), n == 1)
			}
			select {
			case <-sig.Done():
			case <-time.After(pause):
			}
		}
	}()

	time.Sleep(3*pause + pause/2)
	var id int64
	if err := db.QueryRow("SELECT IS_USED_LOCK(?)", a.Name()).Scan(&id); err != nil {
		return err
	}
	tl.say("operator", "KILL CONNECTION %d (A's session)", id)
	if _, err := db.Exec(fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		return err
	}
	next := <-aStopped

	g := <-bGranted
	if g.err != nil {
		return g.err
	}
	b := g.l
	tl.say("holder B", "locked %q, fencing token %d", subject, b.Token())
	if _, err := db.Exec(guardedWrite, 100, b.Token(), b.Token()); err != nil {
		return err
	}
	tl.say("holder B", "batch 100 stored with fencing token %d", b.Token())

	// A late retry of A's, as a write already on its way would arrive.
	res, err := db.Exec(guardedWrite, next, a.Token(), a.Token())
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		tl.say("table", "refused a late retry of A's batch %d: token %d is below the row's %d", next, a.Token(), b.Token())
	} else {
		return errors.New("the table took A's late write")
	}
	if err := a.Unlock(context.Background()); err != nil {
		tl.say("holder A", "Unlock: %v", err)
	}
	if err := b.Unlock(context.Background()); err != nil {
		return err
	}
	tl.say("holder B", "unlocked; its signal after the release: Err() = %v", b.Signal().Err())
	return nil
}

type quiet struct{}

func (quiet) Print(...any) {}
