package mysqllease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The backoff of connect's retries.
const (
	firstBackoff = 10 * time.Millisecond
	maxBackoff   = time.Second
)

// connect takes a connection out of db, retrying with backoff, until ctx
// ends, the errors that may pass (too many connections, a shutdown under
// way), and returning the others at once.
func connect(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	backoff := firstBackoff
	for {
		conn, err := db.Conn(ctx)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect: cut by its context: %w (last attempt: %w)", context.Cause(ctx), err)
		}
		if !transient(err) {
			return nil, fmt.Errorf("connect: %w", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("connect: cut by its context: %w (last attempt: %w)", context.Cause(ctx), err)
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// transient reports whether a connect error may pass if tried again: the
// server's refusals for too many connections and for a shutdown under way.
// A connection refused, a name that does not resolve, a credential, a
// database or a privilege are returned at once: a wrong address looks the
// same as a server restarting, and the caller who expects a restart
// retries Lock.
func transient(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1040, 1203, 1226, 1053: // too many connections; of this user; its resource limit; shutting down
			return true
		}
	}
	return false
}
