package redislease_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/redislease"
	"github.com/zukhruf/lease/issuers/redislease/internal/redistest"
)

var sequenceTrials = flag.Int("sequence.trials", 1, "trials of each sequence of TestSequences")

// The sequences: faults in an order the single-fault table of TestFaults
// never runs, under holders that take turns on one key. Each trial starts a
// group of its own (a primary, two replicas, three Sentinels); four
// holders of the lease take turns on one key and four of redsync's Mutex
// on another, each holder on a Sentinel client of its own, each hold
// lasting holdFor or until the loss.
const (
	turnHolders = 4
	holdFor     = 3 * time.Second
	// convertAfter is how long a resumed old primary may stay a writable
	// primary: a Sentinel that sees a primary it no longer names waits for
	// it to be up four publish periods (8 s) before it makes it a replica,
	// and reads a replica's INFO every 10 s.
	convertAfter = 20 * time.Second
)

// A sequence is a row of the sequences table: apply runs its faults on g
// and returns the time from which holds are counted as after the fault.
type sequence struct {
	name  string
	apply func(t *testing.T, g *redistest.Group) time.Time
}

// resumedAfter pauses the primary (SIGSTOP) until Sentinel names another,
// and resumes it delay later, while it still believes it is the primary
// and until Sentinel makes it a replica.
func resumedAfter(delay time.Duration) sequence {
	return sequence{
		name: fmt.Sprintf("primary paused until Sentinel names another, resumed %d ms after", delay.Milliseconds()),
		apply: func(t *testing.T, g *redistest.Group) time.Time {
			old := g.Primary
			if err := old.Pause(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), redistest.FailoverWithin)
			_, err := g.WaitFailover(ctx, old.Addr())
			cancel()
			switched := time.Now()
			time.Sleep(delay)
			old.Resume()
			if err != nil {
				t.Error(err)
			}
			time.Sleep(convertAfter)
			return switched
		},
	}
}

var sequences = []sequence{
	resumedAfter(0),
	resumedAfter(500 * time.Millisecond),
	resumedAfter(2 * time.Second),
	resumedAfter(10 * time.Second),
	{
		// Renewals that the paused replica does not acknowledge lose
		// their holders at their deadlines; no grant goes to a holder
		// without it while the primary still lists it.
		name: "a replica paused for three TTLs, then resumed",
		apply: func(t *testing.T, g *redistest.Group) time.Time {
			r := g.Replicas[0]
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
			paused := time.Now()
			time.Sleep(3 * faultTTL)
			r.Resume()
			time.Sleep(2 * faultTTL)
			return paused
		},
	},
}

// TestSequences runs each sequence -sequence.trials times, its rows side
// by side, with redsync's holders beside the lease's through the same
// faults: no two holders of the lease may hold at once, no token may be
// granted twice, and the key must still be granted after the fault.
// redsync's figures are recorded, not checked. With -faults.readme, it
// writes the table into the README's sequences section.
func TestSequences(t *testing.T) {
	t.Parallel() // its time is waits, not work: it runs beside the other waiting tests
	rows := make([]sequenceRow, len(sequences))
	t.Run("each", func(t *testing.T) {
		for i, s := range sequences {
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				rows[i].name = s.name
				for range *sequenceTrials {
					sequenceTrial(t, s, &rows[i])
				}
			})
		}
	})
	table := sequenceTable(rows, *faultCommand)
	t.Logf("\n%s", table)
	if *faultReadme != "" && !t.Failed() {
		if err := faulttrial.WriteSection(*faultReadme, "sequences", table); err != nil {
			t.Fatal(err)
		}
	}
}

func sequenceTrial(t *testing.T, s sequence, row *sequenceRow) {
	g := redistest.StartGroup(t, 2)
	key := keyName(t)
	lease := takeTurns(t, g, key, leaseHold)
	peer := takeTurns(t, g, key+"-peer", peerHold)
	time.Sleep(faultTTL)
	since := s.apply(t, g)
	holds, peerHolds := lease.end(), peer.end()
	v := violationsOf(holds)
	for _, line := range v.lines {
		t.Error(line)
	}
	after := 0
	for _, h := range holds {
		if h.from.After(since) {
			after++
		}
	}
	if after == 0 {
		t.Errorf("no hold of the lease began after the fault, in %d holds", len(holds))
	}
	row.add(len(holds), v, len(peerHolds), violationsOf(peerHolds))
	t.Logf("lease: %d holds, lost: %s; redsync: %d holds", len(holds), causes(holds), len(peerHolds))
}

// A hold is one grant to a turn-taking holder: from the return of its Lock
// to the moment it saw its lease lost or let it go.
type hold struct {
	holder   int
	token    int64 // 0 for redsync, which has none
	from, to time.Time
	cause    error // the loss, if it was lost
}

// holdOnce locks key on rdb, holds it until it is lost, holdFor passes
// or ctx ends, lets it go, and returns the hold.
type holdOnce func(ctx context.Context, rdb redis.UniversalClient, key string) (hold, error)

// turns is a set of holders that take turns on one key.
type turns struct {
	mu    sync.Mutex
	holds []hold
	wg    sync.WaitGroup
	stop  context.CancelFunc
}

// takeTurns starts turnHolders holders on key, each on a Sentinel client
// of its own, each holding it with one until stopped.
func takeTurns(t *testing.T, g *redistest.Group, key string, one holdOnce) *turns {
	ctx, stop := context.WithCancel(context.Background())
	tu := &turns{stop: stop}
	for i := range turnHolders {
		rdb := redis.NewFailoverClient(g.FailoverOptions())
		tu.wg.Add(1)
		go func() {
			defer tu.wg.Done()
			defer rdb.Close()
			for ctx.Err() == nil {
				h, err := one(ctx, rdb, key)
				if err != nil {
					// Cut by stop, or retried after a failure.
					sleep(ctx, 20*time.Millisecond)
					continue
				}
				h.holder = i
				tu.mu.Lock()
				tu.holds = append(tu.holds, h)
				tu.mu.Unlock()
			}
		}()
	}
	return tu
}

// end stops the holders and returns their holds, in the order they began.
func (tu *turns) end() []hold {
	tu.stop()
	tu.wg.Wait()
	slices.SortFunc(tu.holds, func(a, b hold) int { return a.from.Compare(b.from) })
	return tu.holds
}

func leaseHold(ctx context.Context, rdb redis.UniversalClient, key string) (hold, error) {
	l, err := faultCfg.Lock(ctx, rdb, key)
	if err != nil {
		return hold{}, err
	}
	h := hold{token: l.Token(), from: time.Now()}
	t := time.NewTimer(holdFor)
	defer t.Stop()
	select {
	case <-l.Signal().Done():
		h.to, h.cause = time.Now(), l.Signal().Err()
	case <-t.C:
		h.to = time.Now()
	case <-ctx.Done():
		h.to = time.Now()
	}
	uctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.Unlock(uctx)
	return h, nil
}

// peerHold holds with redsync's Mutex as holdPeer does: extended every
// third of the expiry, lost when an Extend fails or returns false.
func peerHold(ctx context.Context, rdb redis.UniversalClient, key string) (hold, error) {
	m := newMutex(rdb, key, redsync.WithTries(1<<30), redsync.WithRetryDelay(20*time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		return hold{}, err
	}
	h := hold{from: time.Now()}
	end := time.NewTimer(holdFor)
	defer end.Stop()
	tick := time.NewTicker(faultTTL / 3)
	defer tick.Stop()
	for h.to.IsZero() {
		select {
		case <-tick.C:
			ok, err := m.ExtendContext(ctx)
			switch {
			case ctx.Err() != nil:
				h.to = time.Now()
			case err != nil:
				h.to, h.cause = time.Now(), err
			case !ok:
				h.to, h.cause = time.Now(), errors.New("Extend returned false")
			}
		case <-end.C:
			h.to = time.Now()
		case <-ctx.Done():
			h.to = time.Now()
		}
	}
	uctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.UnlockContext(uctx)
	return h, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// violations are the holds of different holders that overlapped and the
// tokens granted twice.
type violations struct {
	overlaps int
	longest  time.Duration
	twice    int
	lines    []string
}

func violationsOf(holds []hold) violations {
	var v violations
	tokens := map[int64]hold{}
	for i, a := range holds {
		if b, ok := tokens[a.token]; ok && a.token != 0 {
			v.twice++
			v.lines = append(v.lines, fmt.Sprintf("token %d granted twice: to holder %d at %s and to holder %d at %s", a.token, b.holder, clockOf(b.from), a.holder, clockOf(a.from)))
		}
		tokens[a.token] = a
		for _, b := range holds[i+1:] {
			// b began no sooner than a; they overlap if b began before a
			// ended.
			if b.holder == a.holder || !b.from.Before(a.to) {
				continue
			}
			d := a.to.Sub(b.from)
			v.overlaps++
			v.longest = max(v.longest, d)
			v.lines = append(v.lines, fmt.Sprintf("two holders at once for %v: holder %d (token %d) from %s to %s (%v), holder %d (token %d) from %s",
				d.Round(time.Millisecond), a.holder, a.token, clockOf(a.from), clockOf(a.to), a.cause, b.holder, b.token, clockOf(b.from)))
		}
	}
	return v
}

func clockOf(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// causes counts the holds lost by each cause.
func causes(holds []hold) string {
	named := map[error]string{
		redislease.ErrRenewalUnconfirmed: "unconfirmed", redislease.ErrFailedOver: "failed over",
		redislease.ErrDeleted: "deleted", redislease.ErrTakenOver: "taken over",
		redislease.ErrExpired: "expired", redislease.ErrRefused: "refused",
	}
	count := map[string]int{}
	for _, h := range holds {
		if h.cause == nil {
			continue
		}
		name := "other"
		for e, n := range named {
			if errors.Is(h.cause, e) {
				name = n
			}
		}
		count[name]++
	}
	return fmt.Sprint(count)
}

// A sequenceRow adds up the trials of one sequence.
type sequenceRow struct {
	name             string
	trials           int
	holds, peerHolds int
	lease, peer      violations
	peerTrials       int
}

func (r *sequenceRow) add(holds int, v violations, peerHolds int, pv violations) {
	r.trials++
	r.holds += holds
	r.peerHolds += peerHolds
	r.lease.overlaps += v.overlaps
	r.lease.twice += v.twice
	r.lease.longest = max(r.lease.longest, v.longest)
	r.peer.overlaps += pv.overlaps
	r.peer.longest = max(r.peer.longest, pv.longest)
	if pv.overlaps > 0 {
		r.peerTrials++
	}
}

func sequenceTable(rows []sequenceRow, command string) string {
	var b strings.Builder
	b.WriteString("| sequence | trials | lease: holds | lease: two holders at once | lease: longest | tokens granted twice | redsync: holds | redsync: two holders at once (trials) | redsync: longest |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	longest := func(n int, d time.Duration) string {
		if n == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %d | %d | %d (%d) | %s |\n", r.name, r.trials,
			r.holds, r.lease.overlaps, longest(r.lease.overlaps, r.lease.longest), r.lease.twice,
			r.peerHolds, r.peer.overlaps, r.peerTrials, longest(r.peer.overlaps, r.peer.longest))
	}
	fmt.Fprintf(&b, "\nEach trial: a primary, two replicas and three Sentinels (down-after %v), %d holders of the lease (TTL %v) taking turns on one key, each holding it %v or until it is lost, and %d of redsync's Mutex (expiry %v, extended every third of it) on another, every holder on a Sentinel client of its own. A hold runs from the return of Lock to the moment the holder saw the loss or let go; two holds overlap when the later began before the earlier ended.\n",
		redistest.DownAfter, turnHolders, faultTTL, holdFor, turnHolders, faultTTL)
	fmt.Fprintf(&b, "\nMachine: %s. Command: `%s`, %s.\n", faulttrial.Machine(), command, time.Now().Format(time.DateOnly))
	return b.String()
}
