package mysqllease_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/zukhruf/lease/issuers/mysqllease"
)

// A pooler stands, inside the process, for a pooler or proxy that shares
// or moves server sessions (ProxySQL or MaxScale in a multiplexing mode):
// its client connections run their statements on a few server sessions of
// its own. In shared mode every client connection runs on the first
// session; in moving mode each statement runs on the next session in turn.
type pooler struct {
	moving   bool
	backends []*backend
	mu       sync.Mutex
	next     int
}

type backend struct {
	mu   sync.Mutex
	conn driver.Conn
}

// newPooler opens n server sessions with connector and returns a *sql.DB
// whose connections go through the pooler; both are closed at the end of
// the test.
func newPooler(t testing.TB, dsn string, n int, moving bool) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &pooler{moving: moving}
	for range n {
		c, err := connector.Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.backends = append(p.backends, &backend{conn: c})
	}
	t.Cleanup(func() {
		for _, b := range p.backends {
			b.conn.Close()
		}
	})
	db := sql.OpenDB(p)
	t.Cleanup(func() { db.Close() })
	return db
}

func (p *pooler) Connect(context.Context) (driver.Conn, error) { return &clientConn{p: p}, nil }
func (p *pooler) Driver() driver.Driver                        { return nil }

// pick returns the session the next statement runs on, locked.
func (p *pooler) pick() *backend {
	i := 0
	if p.moving {
		p.mu.Lock()
		i = p.next % len(p.backends)
		p.next++
		p.mu.Unlock()
	}
	b := p.backends[i]
	b.mu.Lock()
	return b
}

type clientConn struct{ p *pooler }

var errNoPrepare = errors.New("pooler: prepared statements are not routed")

func (c *clientConn) Prepare(string) (driver.Stmt, error) { return nil, errNoPrepare }
func (c *clientConn) Close() error                        { return nil }
func (c *clientConn) Begin() (driver.Tx, error)           { return nil, errNoPrepare }

func (c *clientConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	b := c.p.pick()
	defer b.mu.Unlock()
	return b.conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *clientConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	b := c.p.pick()
	rows, err := b.conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	if err != nil {
		b.mu.Unlock()
		return nil, err
	}
	return &heldRows{Rows: rows, b: b}, nil
}

// heldRows keeps its session locked until the rows are closed: a session
// runs one statement at a time.
type heldRows struct {
	driver.Rows
	b    *backend
	once sync.Once
}

func (r *heldRows) Close() error {
	err := r.Rows.Close()
	r.once.Do(r.b.mu.Unlock)
	return err
}

// TestPoolerRefused: through a pooler that shares one server session among
// its clients, or moves each statement to another session, Lock refuses
// with ErrPooled, 30 tries each, and no lock is taken.
func TestPoolerRefused(t *testing.T) {
	admin := rootDB(t, server)
	for _, mode := range []struct {
		name   string
		moving bool
	}{{"shared", false}, {"moving", true}} {
		t.Run(mode.name, func(t *testing.T) {
			db := newPooler(t, server.DSN("root", ""), 3, mode.moving)
			subj := subject(t)
			for i := range 30 {
				l, err := fast.Lock(context.Background(), db, subj)
				if l != nil {
					l.Unlock(context.Background())
					t.Fatalf("try %d: Lock through the pooler granted a lease", i)
				}
				if !errors.Is(err, mysqllease.ErrPooled) {
					t.Fatalf("try %d: Lock = %v, want ErrPooled", i, err)
				}
				if id := holder(t, admin, subj); id != 0 {
					t.Fatalf("try %d: session %d holds the lock after the refusal", i, id)
				}
			}
		})
	}
}
