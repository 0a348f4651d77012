package pglease

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/controller"
)

// The waits of a Lock for a lock held elsewhere, between two tries: the
// first about pollFirst, each later one twice the previous, at most
// pollMax, each drawn between half and all of it. A release by a lease of
// any process on the database wakes the waiters at once (pg_notify); the
// tries catch a release that sends nothing: a holder's session ended or
// killed, a lock taken and released by hand. pollMax bounds the grant's lag
// behind such a release.
var (
	pollFirst = 10 * time.Millisecond
	pollMax   = 500 * time.Millisecond
)

// lockShared takes the lease of key on a shared session of pool's (see
// [Config.Sessions]). The lock is tried, never waited for on the server,
// so that no statement holds up the session's heartbeats: a Lock whose
// lock is held elsewhere waits in the process, woken by a release that a
// lease announces on notifyChannel or by its next try. A Lock first claims
// the lock in the process (see claim), so that two leases of the process
// never share one lock on one session, where advisory locks are re-entrant.
func (c Config) lockShared(ctx context.Context, pool *pgxpool.Pool, key int64, subject string, try bool) (*Lease, error) {
	st := setFor(pool, c)
	defer st.done()
	var wake chan struct{}
	if !try {
		wake = st.watch(key)
		defer st.unwatch(key, wake)
	}
	var (
		sh      *shared
		unclaim func()
		claimed lockID
	)
	leave := func() {
		if sh != nil {
			st.leave(sh, nil)
			sh = nil
		}
	}
	marked := false // the waiter's mark (see markSQL) is held on sh
	unmark := func() {
		if marked && sh != nil {
			sh.unmark(key)
		}
		marked = false
	}
	fail := func(err error) (*Lease, error) {
		unmark()
		leave()
		if unclaim != nil {
			unclaim()
		}
		return nil, err
	}
	delay := pollFirst
	var stopWaiting func()
	// held: a try of this Lock found the lock held by another session.
	// announced: a release of the lock was announced since the last such
	// try (see Config.unannouncedGrace).
	held, announced := false, false
	// afterOwn: the Lock waited for a lease of this process on the lock,
	// whose loss or release the process knew before the Lock tried it.
	afterOwn := false
	for {
		if sh == nil {
			var err error
			if sh, err = st.use(ctx, c, key); err != nil {
				return fail(err)
			}
		}
		id := sh.id
		id.key = key
		if unclaim == nil || id != claimed {
			if unclaim != nil {
				unclaim()
				unclaim = nil
			}
			if err := step(ctx, stepClaim); err != nil {
				return fail(err)
			}
			if try {
				u, ok := tryClaim(id)
				if !ok {
					return fail(fmt.Errorf("%w: another lease of this process holds the lock", lease.ErrHeld))
				}
				unclaim = u
			} else {
				var err error
				u, ok := tryClaim(id)
				if !ok {
					stopWaiting := markWaiting(key)
					u, err = claim(ctx, id)
					stopWaiting()
					afterOwn = true
				}
				if err != nil {
					return fail(fmt.Errorf("the wait was cut by its context while another lease of this process held the lock: %w", err))
				}
				unclaim = u
			}
			claimed = id
		}
		if err := step(ctx, stepWait); err != nil {
			return fail(err)
		}
		granted, token, err := sh.take(ctx, c.Fence, key)
		if err != nil {
			var gone errSessionGone
			if errors.As(err, &gone) && ctx.Err() == nil && !errors.Is(err, ErrPooled) {
				marked = false
				leave() // the session ended, and the lock with it: try on another
				continue
			}
			return fail(err)
		}
		if granted && held && !announced && !afterOwn {
			// The holder's release was not announced: its session may
			// have ended, which frees the lock before its process reads
			// the end and loses the lease. Wait for that process, or for
			// the announcement of a release that was a lease's Unlock. A
			// Lock that waited for a lease of this process saw that
			// lease lost or released first, and tried after it.
			t := time.NewTimer(c.unannouncedGrace())
			select {
			case <-wake:
			case <-t.C:
			case <-sh.quit:
				t.Stop()
				marked = false
				leave() // the session ended, and the lock with it: try on another
				continue
			case <-ctx.Done():
				t.Stop()
				sh.release(key)
				return fail(fmt.Errorf("wait for the announcement of the lock's release: %w", context.Cause(ctx)))
			}
			t.Stop()
		}
		if granted {
			unmark()
			if err := step(ctx, stepFence); err != nil {
				sh.release(key)
				return fail(err)
			}
			l := &Lease{ctrl: controller.New(subject), sh: sh, cfg: c, key: key, token: token, unclaim: unclaim}
			if !st.join(sh, l) {
				leave() // the session ended since it granted the lock, which is gone with it
				continue
			}
			return l, nil
		}
		if try {
			return fail(fmt.Errorf("%w: another session holds the lock", lease.ErrHeld))
		}
		held, announced = true, false
		select {
		case <-wake: // an announcement heard before this try is not of the next release
		default:
		}
		if !marked {
			// Mark the wait, then try again at once: a release before the
			// mark announced nothing, and one after it announces itself.
			ok, err := sh.mark(key)
			var gone errSessionGone
			switch {
			case errors.As(err, &gone) && ctx.Err() == nil:
				leave()
			case err != nil:
				return fail(err)
			default:
				// Not marked: a release's check held the mark's lock for
				// its statement, so a lease's Unlock just released the
				// lock, which counts as its announcement.
				marked = ok
				announced = announced || !ok
			}
			continue
		}
		if stopWaiting == nil {
			stopWaiting = markWaiting(key)
			defer stopWaiting()
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		delay = min(2*delay, pollMax)
		select {
		case <-wake:
			announced = true
		case <-t.C:
		case <-sh.quit:
		case <-ctx.Done():
			t.Stop()
			return fail(fmt.Errorf("wait for the lock: %w", context.Cause(ctx)))
		}
		t.Stop()
	}
}

// takeSQL tries the lock of a key (%d), gated on the session (%s), and if
// it is granted takes its fencing token in a table (%s) for the key (%d),
// in one statement: the CTE l runs first, since f reads it.
const takeSQL = "with l as (select pg_catalog.pg_try_advisory_lock(%d) as ok where %s), " +
	"f as (insert into %s as t (key, token) select %d, 1 from l where l.ok " +
	"on conflict (key) do update set token = t.token operator(pg_catalog.+) 1 returning t.token) " +
	"select l.ok, (select token from f), pg_catalog.pg_backend_pid() from l"

// fenceSQL takes the fencing token in a table (%s) for a key (%d), gated
// on the session (%s).
const fenceSQL = "insert into %s as t (key, token) select %d, 1 where %s " +
	"on conflict (key) do update set token = t.token operator(pg_catalog.+) 1 returning token, pg_catalog.pg_backend_pid()"

// unlockMarkSQL releases the lock of a key (%d) and then tries to take its
// mark (the halves, %d and %d, see markSQL) exclusively for the statement's
// transaction only, which fails while a Lock of any process holds it shared,
// gated on the session (%s). If the try fails, a Lock waits for the key,
// and the release is announced by notifySQL.
//
// A waiter marks its wait before it tries the lock again, and the check runs
// after the release, in the same statement, so that either the waiter's try
// comes after the release, or its mark before the check: a release never
// goes unannounced to a marked waiter, and a release that no Lock waits for
// sends no notify (its commit would need a transaction id and a flush of the
// WAL) and costs one statement.
const unlockMarkSQL = "select pg_catalog.pg_advisory_unlock(%d), pg_catalog.pg_try_advisory_xact_lock(%d, %d), pg_catalog.pg_backend_pid() where %s"

// The statements of a lock cycle on a shared session, prepared once when it
// opens (prepareCycleSQL): a Lock's try of a free lock without a fencing
// table, and every release. Each is then one Bind, Execute and Sync, which
// the server runs from its plan without parsing and planning the statement
// again. A prepared statement lives in the server session that prepared it:
// run anywhere else, it fails (invalid_sql_statement_name), which ends the
// session with ErrPooled, and it is gated on the session all the same.
const releaseStatement = "pglease_release"

// tryStatement is the name of the prepared try; the tests run another
// name in its place.
var tryStatement = "pglease_try"

// prepareCycleSQL returns the statements that prepare tryStatement (the
// key, bigint) and releaseStatement (the key and its mark's halves, see
// unlockMarkSQL), both gated on the session by ours.
func prepareCycleSQL(ours string) string {
	return "prepare pglease_try (pg_catalog.int8) as " +
		"select pg_catalog.pg_try_advisory_lock($1), pg_catalog.pg_backend_pid() where " + ours + "; " +
		"prepare " + releaseStatement + " (pg_catalog.int8, pg_catalog.int4, pg_catalog.int4) as " +
		"select pg_catalog.pg_advisory_unlock($1), pg_catalog.pg_try_advisory_xact_lock($2, $3), pg_catalog.pg_backend_pid() where " + ours
}

// executeMessage returns the messages that run the prepared statement stmt
// with params, each in binary, and ask for its rows in text: Bind, Execute
// and Sync, written at once.
func executeMessage(stmt string, params ...[]byte) []byte {
	n := 4 + 1 + len(stmt) + 1 + 2 + 2 + 2 + 2
	for _, p := range params {
		n += 4 + len(p)
	}
	b := make([]byte, 0, 1+n+1+9+1+4)
	b = append(b, 'B')
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, 0) // the unnamed portal
	b = append(b, stmt...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, 1) // one format for every parameter:
	b = binary.BigEndian.AppendUint16(b, 1) // binary
	b = binary.BigEndian.AppendUint16(b, uint16(len(params)))
	for _, p := range params {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	b = binary.BigEndian.AppendUint16(b, 0) // every column in text
	b = append(b, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
	return append(b, 'S', 0, 0, 0, 4)
}

// int8Param and int4Param encode a parameter in binary.
func int8Param(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func int4Param(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

// notifySQL announces the release of a key (%[2]d) on notifyChannel, gated
// on the session (%[5]s).
//
// It is a statement of its own, sent after the release's answer, not a
// column of the release: NOTIFY's commit takes a lock of the whole server,
// which many releases at once can hold past the session's lock_timeout
// (fenceWait), and the error would then be the release's, whose lock the
// server freed all the same (a session lock outlasts the abort of the
// transaction that freed it). A failed announcement only delays the waiters
// of other processes to their next try.
var notifySQL = "select " + notifyCall + ", pg_catalog.pg_backend_pid() where %[5]s"

// notifyCall announces a release of the key %[2]d; the tests replace it.
var notifyCall = "pg_catalog.pg_notify('" + notifyChannel + "', '%[2]d')"

// markSQL takes the mark of a Lock that waits for a key, shared: the
// advisory lock of the key's halves as two int4 keys (%d, %d; pg_locks shows
// it with objsubid 2, apart from the bigint keys' 1), gated on the session
// (%s). unmarkSQL releases it.
const (
	markSQL   = "select pg_catalog.pg_try_advisory_lock_shared(%d, %d), pg_catalog.pg_backend_pid() where %s"
	unmarkSQL = "select pg_catalog.pg_advisory_unlock_shared(%d, %d), pg_catalog.pg_backend_pid() where %s"
)

// markKeys returns the two int4 keys of the mark of key.
func markKeys(key int64) (hi, lo int32) { return int32(key >> 32), int32(key) }

// mark takes the mark of a Lock waiting for key on the session, and reports
// whether it holds it.
func (sh *shared) mark(key int64) (bool, error) {
	hi, lo := markKeys(key)
	rows, err := sh.exec(fmt.Sprintf(markSQL, hi, lo, sh.s.ours()))
	if err != nil {
		return false, fmt.Errorf("mark the wait: %w", err)
	}
	return string(rows[0][0]) == "t", nil
}

// unmark releases the mark of a Lock that waited for key. A failure ends
// the session, which frees the mark.
func (sh *shared) unmark(key int64) {
	hi, lo := markKeys(key)
	rows, err := sh.exec(fmt.Sprintf(unmarkSQL, hi, lo, sh.s.ours()))
	if err == nil && string(rows[0][0]) != "t" {
		err = errors.New("the session did not hold the mark")
	}
	var gone errSessionGone
	if err != nil && !errors.As(err, &gone) {
		sh.fail(fmt.Errorf("%w: a wait's mark could not be released on the shared session, which ended it: %w", ErrConnLost, err))
	}
}

// take tries the lock of key on the session, and when granted takes its
// fencing token in fence, if not nil, in the same statement. A guarded
// write's transaction that holds the token's row makes the statement fail
// after fenceWait with the lock held (a session lock outlasts its
// statement): take then takes the token alone, again and again, until the
// row is free or ctx ends. On an error it leaves the lock free.
func (sh *shared) take(ctx context.Context, fence pgx.Identifier, key int64) (granted bool, token int64, err error) {
	ours := sh.s.ours()
	if fence == nil {
		rows, err := sh.send(executeMessage(tryStatement, int8Param(key)))
		if err != nil {
			return false, 0, fmt.Errorf("try the lock: %w", err)
		}
		return string(rows[0][0]) == "t", 0, nil
	}
	t := fence.Sanitize()
	rows, err := sh.exec(fmt.Sprintf(takeSQL, key, ours, t, key))
	if err == nil {
		if string(rows[0][0]) != "t" {
			return false, 0, nil
		}
		if _, err := fmt.Sscan(string(rows[0][1]), &token); err != nil {
			sh.release(key)
			return false, 0, fmt.Errorf("read the fencing token in %s: %w", quote(t), err)
		}
		return true, token, nil
	}
	var gone errSessionGone
	if errors.As(err, &gone) {
		return false, 0, fmt.Errorf("try the lock: %w", err)
	}
	held, herr := sh.holds(key)
	if herr != nil {
		return false, 0, fmt.Errorf("try the lock: %w; then read pg_locks: %w", err, herr)
	}
	if !held {
		return false, 0, fmt.Errorf("take the lock and the fencing token in %s: %w", quote(t), err)
	}
	delay := fenceWait
	for {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" { // lock_not_available
			sh.release(key)
			return false, 0, fmt.Errorf("take the fencing token in %s: %w", quote(t), err)
		}
		pause := time.NewTimer(delay/2 + rand.N(delay/2+1))
		delay = min(2*delay, pollMax)
		select {
		case <-ctx.Done():
			pause.Stop()
			sh.release(key)
			return false, 0, fmt.Errorf("wait for the fencing token's row in %s: %w", quote(t), context.Cause(ctx))
		case <-pause.C:
		}
		rows, err = sh.exec(fmt.Sprintf(fenceSQL, t, key, ours))
		if err == nil {
			if _, err := fmt.Sscan(string(rows[0][0]), &token); err != nil {
				sh.release(key)
				return false, 0, fmt.Errorf("read the fencing token in %s: %w", quote(t), err)
			}
			return true, token, nil
		}
		if errors.As(err, &gone) {
			return false, 0, fmt.Errorf("take the fencing token: %w", err)
		}
	}
}

// holds reports whether the session holds the lock of key, as pg_locks
// says.
func (sh *shared) holds(key int64) (bool, error) {
	rows, err := sh.exec("select " + lockedSQL(key) + ", pg_catalog.pg_backend_pid() where " + sh.s.ours())
	if err != nil {
		return false, err
	}
	return string(rows[0][0]) == "t", nil
}

// release releases the lock of key on the session, for a Lock that gives
// up a lock it took, and announces it. A release that fails ends the
// session, which frees the lock.
func (sh *shared) release(key int64) error {
	hi, lo := markKeys(key)
	ours := sh.s.ours()
	rows, err := sh.send(executeMessage(releaseStatement, int8Param(key), int4Param(hi), int4Param(lo)))
	if err == nil && string(rows[0][0]) != "t" {
		err = errors.New("the session did not hold the lock")
	}
	if err != nil {
		var gone errSessionGone
		if !errors.As(err, &gone) {
			sh.fail(fmt.Errorf("%w: a release on the shared session failed, which ended it to free the lock: %w", ErrConnLost, err))
		}
		return err
	}
	if string(rows[0][1]) != "t" {
		// A Lock waits for the key. Its answer is not waited for: an error
		// of it is the statement's own, which ends nothing (see notifySQL).
		// A failed write ends the session, which the leases on it learn.
		_ = sh.write(&pending{reply: make(chan reply, 1)}, queryMessage(fmt.Sprintf(notifySQL, key, key, hi, lo, ours)))
	}
	return nil
}

// releaseShared is Unlock of a lease on a shared session: it ends the lease,
// then releases the lock, and announces the release to the waiters of every
// process in a statement sent after it if one waits; the session goes on.
func (l *Lease) releaseShared() error {
	ended := l.ctrl.End()
	sh := l.sh
	if !ended {
		l.unclaim()
		sh.set.leave(sh, l)
		return lostBefore{l.ctrl.Signal().Err()}
	}
	err := sh.release(l.key)
	// Only now may another Lock of this process try the lock, on this
	// session or another.
	l.unclaim()
	sh.set.leave(sh, l)
	if err != nil {
		return fmt.Errorf("%w: release the lock: %w", ErrSessionEnded, err)
	}
	return nil
}

// waiting counts, by key, the Locks of this process that wait for a lock
// held elsewhere or by another lease of the process, for the tests.
var waiting = struct {
	sync.Mutex
	m map[int64]int
}{m: make(map[int64]int)}

// markWaiting counts a Lock of key as waiting, until the returned func.
func markWaiting(key int64) func() {
	waiting.Lock()
	waiting.m[key]++
	waiting.Unlock()
	return func() {
		waiting.Lock()
		if waiting.m[key]--; waiting.m[key] == 0 {
			delete(waiting.m, key)
		}
		waiting.Unlock()
	}
}
