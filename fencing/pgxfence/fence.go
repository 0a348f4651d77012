// Package pgxfence is the SQL fence of package fencing for pgx's own
// transactions: [Fence.Check] raises a resource's fence inside a pgx.Tx,
// in one statement, as [fencing.SQL.Check] does inside a *sql.Tx.
//
// The fence table is the one of [fencing.SQL] with the Postgres dialect:
// (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL); its DDL
// creates it.
package pgxfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/zukhruf/lease/fencing"
)

// Fence fences resources in a table of a PostgreSQL database, in the
// caller's pgx transaction. The zero Fence has no table and each call
// returns an error that names it.
type Fence struct {
	Table string // the fence table, a name or schema.name of letters, digits and '_'
}

func (f Fence) table() (string, error) {
	if _, err := (fencing.SQL{Table: f.Table, Dialect: fencing.Postgres}).DDL(); err != nil {
		return "", fmt.Errorf("pgxfence: Fence.Table %q is not a table name (letters, digits and '_', with one optional schema)", f.Table)
	}
	return `"` + strings.ReplaceAll(f.Table, ".", `"."`) + `"`, nil
}

// DDL returns the statement that creates f's table if it does not exist.
func (f Fence) DDL() (string, error) {
	return fencing.SQL{Table: f.Table, Dialect: fencing.Postgres}.DDL()
}

// Check raises resource's fence to token inside tx, or returns an error
// wrapping a *[fencing.StaleError] when a higher token was accepted; the
// caller's writes in tx then commit with the fence or not at all. An equal
// token passes. It is [fencing.SQL.Check]'s statement: one round trip, two
// on a refusal; after a refusal the caller must roll tx back.
func (f Fence) Check(ctx context.Context, tx pgx.Tx, resource string, token int64) error {
	t, err := f.table()
	if err != nil {
		return err
	}
	if resource == "" || len(resource) > fencing.MaxResource {
		return fmt.Errorf("pgxfence: resource %q: want 1 to %d bytes", resource, fencing.MaxResource)
	}
	if tx == nil {
		return errors.New("pgxfence: Check called with a nil pgx.Tx")
	}
	var current int64
	err = tx.QueryRow(ctx, "INSERT INTO "+t+" AS f (resource, token) VALUES ($1, $2) "+
		"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token "+
		"RETURNING token", resource, token).Scan(&current)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgxfence: raise the fence of %q: %w", resource, err)
	}
	if err := tx.QueryRow(ctx, "SELECT token FROM "+t+" WHERE resource = $1", resource).Scan(&current); err != nil {
		return fmt.Errorf("pgxfence: read the fence of %q after a refusal: %w", resource, err)
	}
	return &fencing.StaleError{Resource: resource, Token: token, Current: current}
}

// Beginner begins pgx transactions: a *pgx.Conn, a *pgxpool.Pool, a pgx.Tx.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Advance raises resource's fence to token in a transaction of its own, or
// returns an error wrapping a *[fencing.StaleError]: the call a new holder
// makes right after Lock, so that every older holder's write is refused
// from then on.
func (f Fence) Advance(ctx context.Context, db Beginner, resource string, token int64) error {
	if _, err := f.table(); err != nil {
		return err
	}
	if db == nil {
		return errors.New("pgxfence: Advance called with a nil Beginner")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgxfence: begin: %w", err)
	}
	if err := f.Check(ctx, tx, resource, token); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgxfence: commit the fence of %q: %w", resource, err)
	}
	return nil
}
