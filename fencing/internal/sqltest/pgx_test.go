package sqltest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease/fencing/pgxfence"
	"github.com/zukhruf/lease/fencingtest"
)

// pgxStore is fencingtest's Store on a pgxpool.Pool of its own, fenced by
// pgxfence in the same table as the database/sql fence.
type pgxStore struct {
	pool *pgxpool.Pool
	f    pgxfence.Fence
}

func openPgx(t *testing.T, addr string) fencingtest.Store {
	pool, err := pgxpool.New(context.Background(), dialects["Postgres"].dsn(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &pgxStore{pool, pgxfence.Fence{Table: fenceTable}}
}

func (s *pgxStore) Write(ctx context.Context, resource string, token int64, value string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := s.f.Check(ctx, tx, resource, token); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, dialects["Postgres"].upsert, resource, value, token); err != nil {
		return fmt.Errorf("write %s: %w", resource, err)
	}
	return tx.Commit(ctx)
}

func (s *pgxStore) Advance(ctx context.Context, resource string, token int64) error {
	return s.f.Advance(ctx, s.pool, resource, token)
}

func (s *pgxStore) Get(ctx context.Context, resource string) (string, int64, error) {
	var v string
	var tok int64
	err := s.pool.QueryRow(ctx, dialects["Postgres"].get, resource).Scan(&v, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, nil
	}
	return v, tok, err
}

func (s *pgxStore) Put(ctx context.Context, resource, value string, token int64) error {
	_, err := s.pool.Exec(ctx, dialects["Postgres"].upsert, resource, value, token)
	return err
}

// TestConformancePgx runs fencingtest on pgxfence, on PostgreSQL.
func TestConformancePgx(t *testing.T) {
	fencingtest.Run(t, fencingtest.Harness{Addr: addrs["Postgres"], Open: openPgx})
}

// TestNegativeControlsPgx runs fencingtest's fences built wrong over the
// pgx store: each must fail the suite.
func TestNegativeControlsPgx(t *testing.T) {
	fencingtest.RunNegativeControls(t, fencingtest.Harness{Addr: addrs["Postgres"], Open: openPgx})
}
