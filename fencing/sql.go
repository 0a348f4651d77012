package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// A Dialect is the SQL a database speaks: [Postgres] or [MySQL].
type Dialect int

const (
	// Postgres is PostgreSQL's SQL, with $1 placeholders (pgx's stdlib,
	// lib/pq).
	Postgres Dialect = iota + 1
	// MySQL is MySQL's and MariaDB's SQL, with ? placeholders
	// (go-sql-driver/mysql), on InnoDB.
	MySQL
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "Postgres"
	case MySQL:
		return "MySQL"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// MaxResource is the longest resource name, in bytes, that the fence table
// of [SQL] holds.
const MaxResource = 255

// SQL fences resources in a table of the user's database, in the caller's
// transaction. The table has the columns (resource VARCHAR(255) PRIMARY
// KEY, token BIGINT NOT NULL), one row for each resource fenced;
// [SQL.CreateTable] creates it.
//
// A SQL is a value: the zero SQL fences nothing, and each call returns an
// error that names the missing field.
type SQL struct {
	Table   string  // the fence table, a name or schema.name of letters, digits and '_'
	Dialect Dialect // Postgres or MySQL
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// table returns the quoted table name, or an error naming the mistake.
func (f SQL) table() (string, error) {
	if !identifier.MatchString(f.Table) {
		return "", fmt.Errorf("fencing: SQL.Table %q is not a table name (letters, digits and '_', with one optional schema)", f.Table)
	}
	q := `"`
	switch f.Dialect {
	case Postgres:
	case MySQL:
		q = "`"
	default:
		return "", fmt.Errorf("fencing: SQL.Dialect %v is neither fencing.Postgres nor fencing.MySQL", f.Dialect)
	}
	return q + strings.ReplaceAll(f.Table, ".", q+"."+q) + q, nil
}

// DDL returns the statement that creates f's table if it does not exist.
func (f SQL) DDL() (string, error) {
	t, err := f.table()
	if err != nil {
		return "", err
	}
	return "CREATE TABLE IF NOT EXISTS " + t + " (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL)", nil
}

// CreateTable creates f's table in db if it does not exist.
func (f SQL) CreateTable(ctx context.Context, db *sql.DB) error {
	ddl, err := f.DDL()
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("fencing: create the fence table: %w", err)
	}
	return nil
}

// Check raises resource's fence to token inside tx, or returns an error
// wrapping a *[StaleError] when a higher token was accepted; the caller's
// writes in tx then commit with the fence or not at all. An equal token
// passes.
//
// The compare and the raise are one statement, which locks the fence's row
// until tx ends: a newer holder's Check waits for tx to commit or roll
// back, and an older holder's Check, once tx committed, is refused. On
// PostgreSQL it is one statement (two on a refusal, which reads the
// current token); on MySQL and MariaDB one, whose answer carries the
// fence's token in its LAST_INSERT_ID: Check leaves the session's
// LAST_INSERT_ID() at the fence's token, so read an auto-increment id you
// need from your insert's [sql.Result] or before Check. After a refusal
// the caller must roll tx back.
//
// Under REPEATABLE READ or SERIALIZABLE, PostgreSQL answers a fence raised
// by a transaction that committed after tx's snapshot with a serialization
// failure rather than a refusal: an error, which is not ErrStale, after
// which nothing of tx commits either.
func (f SQL) Check(ctx context.Context, tx *sql.Tx, resource string, token int64) error {
	t, err := f.table()
	if err != nil {
		return err
	}
	if resource == "" || len(resource) > MaxResource {
		return fmt.Errorf("fencing: resource %q: want 1 to %d bytes", resource, MaxResource)
	}
	if tx == nil {
		return errors.New("fencing: Check called with a nil *sql.Tx")
	}
	var current int64
	switch f.Dialect {
	case Postgres:
		err := tx.QueryRowContext(ctx, "INSERT INTO "+t+" AS f (resource, token) VALUES ($1, $2) "+
			"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token "+
			"RETURNING token", resource, token).Scan(&current)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("fencing: raise the fence of %q: %w", resource, err)
		}
		// Refused; the row is locked by the statement, so this reads the
		// token that refused it.
		if err := tx.QueryRowContext(ctx, "SELECT token FROM "+t+" WHERE resource = $1", resource).Scan(&current); err != nil {
			return fmt.Errorf("fencing: read the fence of %q after a refusal: %w", resource, err)
		}
	case MySQL:
		// The row is inserted, raised, or left as it is, and either way
		// LAST_INSERT_ID(expr) puts the token it holds after the statement
		// into the OK packet, which the driver returns as the result's
		// LastInsertId: no second statement reads it. The affected-rows
		// count would not tell a refusal from an equal token, nor, with the
		// driver's clientFoundRows, from an insert. LAST_INSERT_ID is
		// unsigned; the casts keep a negative token's bits.
		res, err := tx.ExecContext(ctx, "INSERT INTO "+t+" (resource, token) VALUES (?, CAST(LAST_INSERT_ID(?) AS SIGNED)) "+
			"ON DUPLICATE KEY UPDATE token = CAST(LAST_INSERT_ID(GREATEST(token, VALUES(token))) AS SIGNED)", resource, token)
		if err != nil {
			return fmt.Errorf("fencing: raise the fence of %q: %w", resource, err)
		}
		if current, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("fencing: raise the fence of %q: the driver gives no LastInsertId: %w", resource, err)
		}
		if current == token {
			return nil
		}
		if current < token {
			return fmt.Errorf("fencing: raise the fence of %q to %d: the server answered %d, not the fence's token (is the driver go-sql-driver/mysql, and the server MySQL or MariaDB?)", resource, token, current)
		}
	}
	return &StaleError{Resource: resource, Token: token, Current: current}
}

// Advance raises resource's fence to token in a transaction of its own, or
// returns an error wrapping a *[StaleError] when a higher token was
// accepted: the call a new holder makes right after Lock, so that every
// older holder's write is refused from then on.
func (f SQL) Advance(ctx context.Context, db *sql.DB, resource string, token int64) (err error) {
	if _, err := f.table(); err != nil {
		return err
	}
	if db == nil {
		return errors.New("fencing: Advance called with a nil *sql.DB")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fencing: begin: %w", err)
	}
	if err := f.Check(ctx, tx, resource, token); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fencing: commit the fence of %q: %w", resource, err)
	}
	return nil
}
