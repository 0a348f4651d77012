package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/lockset/check"
	"github.com/zukhruf/lease/internal/lockset/fakeclock"
	"github.com/zukhruf/lease/internal/lockset/history"
)

// The kinds of fault, each made for a random time from a third of the TTL
// to three TTLs (past the lease, most of the time), and healed, by mix.
var faultMixes = map[string][]string{
	// A holder's process: SIGSTOP of a process that holds a lock.
	"process": {check.PauseHolder},
	// A holder's link to the server, through its proxy: silent both ways,
	// silent one way, delayed by more than the TTL.
	"network": {"cut-holder", "drop-to-server", "drop-to-client", "slow-holder"},
	// The server's process: SIGSTOP, or SIGKILL and a restart on its data
	// once the fault ends; for Redis also a restart without persistence
	// (kill-server-wipe: its data removed before the restart).
	"server": {"pause-server", "kill-server"},
	// An operator deletes the keys of a lock (for the databases: ends the
	// session that holds it).
	"operator": {check.DeleteLockKeys},
	// Redis's only: the server's wall clock, by which it expires keys, run
	// slow, fast within the lease's margin, or fast beyond it; half the
	// faults, the other half a holder's renewals slowed or lost, which a
	// fast clock turns into an early expiry.
	"clock": {check.ClockRate, check.ClockRate, "slow-holder", "drop-to-server"},
	// etcd's only: a cluster of three members, whose peer links pass
	// through proxies; one member at a time, the leader half of the
	// time, isolated from its peers, killed or stopped, and the holders'
	// own faults among them.
	"failover": {IsolateMember, KillMember, PauseMember, check.PauseHolder, "slow-holder", check.CutHolder},
	// Redis's only: a primary, two replicas and three Sentinels; the
	// primary stopped (past the Sentinels' down-after: failed over, and
	// resumed after) or killed, one server at a time, a replica's link
	// silent, and the holders' own faults among them.
	"sentinel": {PausePrimary, PausePrimary, KillPrimary, CutReplication, check.PauseHolder, "slow-holder", check.CutHolder},
	// Redis's only: a Cluster of three primaries, each with a replica; a
	// primary stopped (past the node timeout: failed over, and resumed
	// after) or killed, one at a time, and the holders' own faults.
	"cluster": {PausePrimary, PausePrimary, KillPrimary, check.PauseHolder, "slow-holder", check.CutHolder},
	// PostgreSQL's only: a primary and a synchronous standby; the primary
	// stopped (fast, or killed) and the standby promoted, and the
	// holders' own faults among them.
	"standby": {FailoverFast, FailoverKill, check.PauseHolder, "slow-holder", check.CutHolder},
}

// clockRates are the rates of a clock-rate fault: slow, within the margin
// of redislease's default (TTL/10: 1.1), and beyond it.
var clockRates = []float64{0.5, 1.05, 1.5, 2, 4}

// holderKinds are the kinds of fault made to a holder, its process or its
// link; a fault of another kind is made once, to the server or to a lock.
var holderKinds = map[string]bool{"pause-holder": true, check.CutHolder: true, "drop-to-server": true, "drop-to-client": true, "slow-holder": true}

// mixes lists the mixes of every issuer in the order lockset-all runs
// them; all is every kind of the others.
var mixes = []string{"all", "network", "server", "process", "operator"}

// mixesOf returns the mixes of issuer: Redis's runs have the clock mix
// too, apart from all, since an overlap where the clock runs beyond the
// margin is no violation, and its server runs under libfaketime
// (package fakeclock), and the sentinel and cluster mixes, whose server
// is a group behind Sentinels or a Cluster; etcd's have the failover mix, whose server is a
// cluster of three; PostgreSQL's the standby mix, whose server is a
// primary and a standby.
func mixesOf(issuer string) []string {
	switch issuer {
	case "redis":
		return append(slices.Clip(mixes), "clock", "sentinel", "cluster")
	case "etcd":
		return append(slices.Clip(mixes), "failover")
	case "pg":
		return append(slices.Clip(mixes), "standby")
	}
	return mixes
}

// faultKinds returns the kinds of mix for issuer.
func faultKinds(issuer, mix string) ([]string, error) {
	if !slices.Contains(mixesOf(issuer), mix) {
		return nil, fmt.Errorf("%s has no fault mix %q (%s)", issuer, mix, strings.Join(mixesOf(issuer), ", "))
	}
	var kinds []string
	if mix == "all" {
		for _, m := range mixes[1:] {
			kinds = append(kinds, faultMixes[m]...)
		}
	} else {
		var ok bool
		if kinds, ok = faultMixes[mix]; !ok {
			return nil, fmt.Errorf("no fault mix %q (%s)", mix, strings.Join(mixes, ", "))
		}
	}
	if issuer == "redis" && (mix == "all" || mix == "server") {
		kinds = append(slices.Clip(kinds), check.KillServerWipe)
	}
	if issuer == "pg" || issuer == "mysql" {
		// The databases' locks have no keys: the operator's mistake is to
		// end the session that holds one.
		kinds = slices.Clone(kinds)
		if i := slices.Index(kinds, check.DeleteLockKeys); i >= 0 {
			kinds[i] = check.TerminateSession
		}
	}
	return kinds, nil
}

// schedule makes faults until d has passed: a new fault every 5 to 15 s,
// each healed after its own duration, so that some overlap.
func (r *runner) schedule(d time.Duration, kinds []string) {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		gap := 5*time.Second + time.Duration(r.rng.Int64N(int64(10*time.Second)))
		if time.Until(end) < gap {
			time.Sleep(time.Until(end))
			return
		}
		time.Sleep(gap)
		kind := kinds[r.rng.IntN(len(kinds))]
		length := r.ttl/3 + time.Duration(r.rng.Int64N(int64(3*r.ttl-r.ttl/3)))
		rate := 1.0
		if kind == check.ClockRate {
			rate = clockRates[r.rng.IntN(len(clockRates))]
		}
		targets := r.pickHolders()
		if !holderKinds[kind] {
			targets = targets[:1]
		}
		// The fault's own choices (which member, which primary) are
		// drawn here, where the schedule's generator is used alone.
		choice := r.rng.Uint64()
		for _, target := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.fault(kind, length, target, rate, choice)
			}()
		}
	}
}

// pickHolders returns the clients that hold a lock, each with probability
// one half but at least one, in random order; or, when no client holds
// one, a client at random.
func (r *runner) pickHolders() []*contender {
	r.mu.Lock()
	defer r.mu.Unlock()
	var held []*contender
	for _, c := range r.clients {
		if len(r.heldBy(c)) > 0 {
			held = append(held, c)
		}
	}
	if len(held) == 0 {
		return []*contender{r.clients[r.rng.IntN(len(r.clients))]}
	}
	r.rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	n := 1
	for n < len(held) && r.rng.IntN(2) == 0 {
		n++
	}
	return held[:n]
}

// heldBy returns the locks c holds, as the events say; under r.mu.
func (r *runner) heldBy(c *contender) []string {
	var held []string
	for _, l := range c.locks {
		if r.holders[l] == c.proc.name {
			held = append(held, l)
		}
	}
	return held
}

// healOnce counts one more fault on a client's link or process in active,
// and returns the heal of it, which heals only once no other fault of the
// same count is active: two faults that overlap on one link end when the
// later ends.
func (r *runner) healOnce(active *int, heal func()) func() {
	r.mu.Lock()
	*active++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		*active--
		last := *active == 0
		r.mu.Unlock()
		if last {
			heal()
		}
	}
}

// serverKinds are the kinds of fault made to the server's process. They
// are made one at a time: a second kill before the first restart would
// start a second server beside it.
// A change of the clock's rate is made to the server's process too: a
// restart during one would count the rate from the new process's start.
// A member's fault is made one at a time, so that a quorum is left.
var serverKinds = map[string]bool{"pause-server": true, "kill-server": true, check.KillServerWipe: true, check.ClockRate: true,
	IsolateMember: true, KillMember: true, PauseMember: true, PausePrimary: true, KillPrimary: true, CutReplication: true,
	FailoverFast: true, FailoverKill: true}

// fault makes one fault for length and records its window; rate is a
// clock-rate fault's; choice picks the target of a fault to one of
// several servers.
func (r *runner) fault(kind string, length time.Duration, c *contender, rate float64, choice uint64) {
	if serverKinds[kind] {
		r.serverFaults.Lock()
		defer r.serverFaults.Unlock()
	}
	start := history.Now()
	heal := func() {}
	erasedAt := int64(-1)     // when an erasure's call returned
	var erasedLock string     // an erasure's lock: one c holds, by choice
	var sessionMates []string // the other locks c held when an erasure ended a session
	var server string         // a member's fault's: its name; a fault's of a server of Redis's group: its address
	var rateError float64     // a clock-rate fault's measure's uncertainty
	switch kind {
	case check.PauseHolder:
		c.proc.signal(syscall.SIGSTOP)
		heal = r.healOnce(&c.paused, func() { c.proc.signal(syscall.SIGCONT) })
	case check.CutHolder:
		c.eachProxy((*faultnet.Proxy).Cut)
		heal = r.healOnce(&c.faulted, func() { c.eachProxy((*faultnet.Proxy).Heal) })
	case "drop-to-server":
		c.eachProxy(func(p *faultnet.Proxy) { p.Drop(faultnet.ToServer) })
		heal = r.healOnce(&c.faulted, func() { c.eachProxy((*faultnet.Proxy).Heal) })
	case "drop-to-client":
		c.eachProxy(func(p *faultnet.Proxy) { p.Drop(faultnet.ToClient) })
		heal = r.healOnce(&c.faulted, func() { c.eachProxy((*faultnet.Proxy).Heal) })
	case "slow-holder":
		c.eachProxy(func(p *faultnet.Proxy) { p.Delay(r.ttl + r.ttl/2) })
		heal = r.healOnce(&c.faulted, func() { c.eachProxy((*faultnet.Proxy).Heal) })
	case IsolateMember, KillMember, PauseMember:
		var m *member
		m, server = r.pickMember(choice)
		heal = r.memberFault(kind, m)
	case PausePrimary, KillPrimary, CutReplication:
		var healed func() string
		var err error
		if server, healed, err = r.redisGroupFault(kind, choice); err != nil {
			fmt.Println("lockset:", kind+":", err)
			return
		}
		heal = func() { kind = healed() }
	case FailoverFast, FailoverKill:
		var err error
		if server, heal, err = r.pgFailover(kind); err != nil {
			fmt.Println("lockset:", kind+":", err)
			return
		}
		// The window ends at the promotion; the heal makes a new
		// standby, meanwhile commits wait for it.
		length = 0
	case "pause-server":
		r.mu.Lock()
		s := r.server
		r.mu.Unlock()
		s.signal(syscall.SIGSTOP)
		heal = func() { s.signal(syscall.SIGCONT) }
	case "kill-server", check.KillServerWipe:
		r.mu.Lock()
		s := r.server
		r.mu.Unlock()
		if r.issuer == "k8s" {
			// etcd keeps the objects in lockset-kube's process: the
			// apiserver is what crashes.
			s.signal(syscall.SIGUSR1)
			heal = func() { s.signal(syscall.SIGUSR2) }
			break
		}
		s.signal(syscall.SIGKILL)
		<-s.done
		if kind == check.KillServerWipe {
			os.RemoveAll(filepath.Join(r.dir, "server"))
		}
		heal = func() {
			if _, err := r.startServer(); err != nil {
				fmt.Println("lockset: restart the server:", err)
			}
		}
	case check.ClockRate:
		read, closeRead := r.redisClock()
		if _, _, err := r.clock.SetRate(rate, read); err != nil {
			fmt.Println("lockset: clock-rate:", err)
		}
		first, err := fakeclock.Best(read)
		heal = func() {
			// The rate measured, from the first reading to the last, and
			// its uncertainty; none if a reading failed (a fault of an
			// unknown rate excuses nothing).
			rate = 0
			if last, err2 := fakeclock.Best(read); err == nil && err2 == nil {
				rate, rateError = fakeclock.Rate(first, last)
			} else {
				fmt.Println("lockset: clock-rate: not measured:", errors.Join(err, err2))
			}
			if _, _, err := r.clock.SetRate(1, read); err != nil {
				fmt.Println("lockset: clock-rate:", err)
			}
			closeRead()
		}
	case check.DeleteLockKeys, check.TerminateSession:
		// The window is the call's: from just before the deletion's or
		// the session's end is sent to its reply. One that erased
		// nothing (the lock was free; the server did not answer) is no
		// fault.
		r.mu.Lock()
		held := r.heldBy(c)
		r.mu.Unlock()
		if len(held) == 0 {
			held = c.locks
		}
		erasedLock = held[choice%uint64(len(held))]
		var erased bool
		start, erased = r.eraseLock(erasedLock)
		if !erased {
			return
		}
		if kind == check.TerminateSession {
			// The session may hold c's other locks too (a process's
			// leases share a few sessions): each is erased, and
			// recorded as its lock's erasure. One that lived in
			// another session is not lost at the waiter's grant, which
			// no race then excuses.
			sessionMates = slices.DeleteFunc(slices.Clone(held), func(l string) bool { return l == erasedLock })
		}
		erasedAt = history.Now()
		length = 0
	}
	time.Sleep(length)
	// The end is stamped before the heal, so that nothing the fault held
	// back happens before it.
	end := history.Now()
	if erasedAt >= 0 {
		end = erasedAt
	}
	heal()
	r.mu.Lock()
	f := check.Fault{Kind: kind, StartNS: start, EndNS: end}
	switch {
	case holderKinds[kind]:
		f.Target = c.proc.name
	case kind == check.DeleteLockKeys, kind == check.TerminateSession:
		f.Target = erasedLock
	case kind == check.ClockRate:
		f.Rate, f.RateError = rate, rateError
	case server != "":
		f.Target = server
	}
	r.faults = append(r.faults, f)
	for _, l := range sessionMates {
		f.Target = l
		r.faults = append(r.faults, f)
		r.mateRecords++
	}
	r.mu.Unlock()
}

// eraseLock erases lock on the server as an operator's mistake would:
// deletes its keys (its Lease object, for Kubernetes) or, on the
// databases, ends the session that holds it. It returns the time just
// before the call that erased it was sent, and whether it erased
// anything.
func (r *runner) eraseLock(lock string) (int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), r.ttl)
	defer cancel()
	addr := fmt.Sprintf("127.0.0.1:%d", r.serverPort)
	switch r.issuer {
	case "k8s":
		return r.kubeDeleteLease(ctx, lock)
	case "nats":
		return r.natsDeleteKey(ctx, lock)
	case "s3":
		return r.s3DeleteObject(ctx, lock)
	case "pg":
		return r.pgTerminateHolder(ctx, lock)
	case "mysql":
		return r.mysqlTerminateHolder(ctx, lock)
	case "redis":
		rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: r.ttl})
		defer rdb.Close()
		if rdb.Ping(ctx).Err() != nil {
			return 0, false
		}
		at := history.Now()
		n, err := rdb.Del(ctx, "lockset:"+lock).Result()
		return at, err == nil && n > 0
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: r.ttl, Logger: zap.NewNop()})
	if err != nil {
		return 0, false
	}
	defer cli.Close()
	if _, err := cli.Get(ctx, "/lockset/"); err != nil {
		return 0, false
	}
	at := history.Now()
	resp, err := cli.Delete(ctx, "/lockset/"+lock+"/", clientv3.WithPrefix())
	return at, err == nil && resp.Deleted > 0
}
