package mysqllease

import (
	"context"
	"database/sql"
)

// Claim records a live lease of this process on the lock name of db's
// server, as Lock does once the server grants it, and returns the func that
// ends the record.
func Claim(ctx context.Context, db *sql.DB, name string) (func(), error) {
	var server string
	if err := db.QueryRowContext(ctx, "SELECT "+serverSQL).Scan(&server); err != nil {
		return nil, err
	}
	return claim(ctx, lockID{server, name})
}

// SetLeasesPerSession sets how many leases a shared session holds before a
// Lock opens another, and returns the func that restores it.
func SetLeasesPerSession(n int) (restore func()) {
	old := leasesPerSession
	leasesPerSession = n
	return func() { leasesPerSession = old }
}
