package pglease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The backoff of Lock's retries of a connection that may succeed later:
// the first retry after about retryFirst, each later one after about twice
// the previous wait, at most retryMax; each wait is drawn between half and
// all of its value, so that processes that failed together do not retry
// together.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
)

// checkPool panics, naming call, if pool is nil or was not made by
// pgxpool.New or NewWithConfig; a *pgxpool.Pool has no other nil than the
// untyped one.
func checkPool(pool *pgxpool.Pool, call string) {
	if pool == nil {
		panic("pglease: " + call + " called with a nil pool")
	}
	defer func() {
		if recover() != nil {
			panic("pglease: " + call + " called with a pool not made by pgxpool.New or pgxpool.NewWithConfig")
		}
	}()
	pool.Config() // a zero Pool has no configuration
}

// acquire takes a connection out of pool. It returns at once an error that
// cannot heal (see transient), and retries the others with backoff until
// ctx ends; then its error wraps both ctx's cause and the last attempt's.
func acquire(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Conn, error) {
	var last error
	wait := retryFirst
	for attempts := 1; ; attempts++ {
		c, err := pool.Acquire(ctx)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			if cause := context.Cause(ctx); last == nil {
				if errors.Is(err, cause) {
					return nil, fmt.Errorf("take a connection out of the pool: %w", err)
				}
				// The pool reports ctx's error, not its cause.
				return nil, fmt.Errorf("take a connection out of the pool: cut by its context: %w: %w", cause, err)
			}
			return nil, fmt.Errorf("take a connection out of the pool: cut by its context after %d attempts: %w; the last attempt before: %w",
				attempts, context.Cause(ctx), last)
		}
		if !transient(err) {
			return nil, fmt.Errorf("take a connection out of the pool: %w", err)
		}
		last = err
		d := wait/2 + rand.N(wait/2+1)
		wait = min(2*wait, retryMax)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("take a connection out of the pool: cut by its context after %d attempts: %w; the last attempt: %w",
				attempts, context.Cause(ctx), last)
		}
	}
}

// transient reports whether a connection's failure may heal by itself, so
// that Lock retries it: the server is starting up, shutting down or in
// recovery (57P03), too many connections or short of resources (class 53),
// a network timeout, a reset, an unreachable network or host, a name
// server's time-out. Everything else is a mistake that does not heal, and
// Lock returns it at once: a refused credential or database, a permission,
// a name that does not resolve, nothing listening at the address (a
// server restarting is then briefly refused: the caller retries Lock if it
// means to wait), a closed pool, a TLS failure.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57P03" || len(pgErr.Code) == 5 && pgErr.Code[:2] == "53"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsTimeout && !dnsErr.IsNotFound
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}
