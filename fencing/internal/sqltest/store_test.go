package sqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/fencingtest"
)

// The fence table and the registers the suite writes under it.
const (
	fenceTable = "fences"
	dataTable  = "registers"
	database   = "fencetest" // MariaDB's; PostgreSQL's is postgres
)

// dialect is what differs between the two servers: the driver, the data
// source, the upsert of a register.
type dialect struct {
	fence  fencing.SQL
	driver string
	dsn    func(addr string) string
	upsert string
	get    string
}

var dialects = map[string]dialect{
	"Postgres": {
		fence:  fencing.SQL{Table: fenceTable, Dialect: fencing.Postgres},
		driver: "pgx",
		dsn:    func(addr string) string { return "postgres://postgres@" + addr + "/postgres?sslmode=disable" },
		upsert: "INSERT INTO " + dataTable + " (resource, value, token) VALUES ($1, $2, $3) " +
			"ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token",
		get: "SELECT value, token FROM " + dataTable + " WHERE resource = $1",
	},
	"MySQL": {
		fence:  fencing.SQL{Table: fenceTable, Dialect: fencing.MySQL},
		driver: "mysql",
		dsn: func(addr string) string {
			c := mysql.NewConfig()
			c.User, c.Net, c.Addr, c.DBName = "root", "tcp", addr, database
			return c.FormatDSN()
		},
		upsert: "INSERT INTO " + dataTable + " (resource, value, token) VALUES (?, ?, ?) " +
			"ON DUPLICATE KEY UPDATE value = VALUES(value), token = VALUES(token)",
		get: "SELECT value, token FROM " + dataTable + " WHERE resource = ?",
	},
}

// setup creates the fence table and the registers on the server at addr.
func (d dialect) setup(ctx context.Context, addr string) error {
	db, err := sql.Open(d.driver, d.dsn(addr))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := d.fence.CreateTable(ctx, db); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+dataTable+" (resource VARCHAR(255) PRIMARY KEY, value TEXT NOT NULL, token BIGINT NOT NULL)")
	return err
}

// store is fencingtest's Store on one *sql.DB: a fenced write is the
// fence's Check and the register's upsert in one transaction.
type store struct {
	d  dialect
	db *sql.DB
}

func (d dialect) open(t *testing.T, addr string) fencingtest.Store {
	db, err := sql.Open(d.driver, d.dsn(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &store{d, db}
}

func (s *store) Write(ctx context.Context, resource string, token int64, value string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := s.d.fence.Check(ctx, tx, resource, token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.d.upsert, resource, value, token); err != nil {
		return fmt.Errorf("write %s: %w", resource, err)
	}
	return tx.Commit()
}

func (s *store) Advance(ctx context.Context, resource string, token int64) error {
	return s.d.fence.Advance(ctx, s.db, resource, token)
}

func (s *store) Get(ctx context.Context, resource string) (string, int64, error) {
	var v string
	var tok int64
	err := s.db.QueryRowContext(ctx, s.d.get, resource).Scan(&v, &tok)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return v, tok, err
}

func (s *store) Put(ctx context.Context, resource, value string, token int64) error {
	_, err := s.db.ExecContext(ctx, s.d.upsert, resource, value, token)
	return err
}
