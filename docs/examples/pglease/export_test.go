package pglease

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SetTimeouts sets the session timeouts that Lock sets for a lease of cfg,
// without taking a lock.
func SetTimeouts(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	_, _, err = prepare(ctx, conn, c, 0)
	return err
}
