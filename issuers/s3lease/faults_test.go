package s3lease_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/faulttrial"
	"github.com/zukhruf/lease/issuers/s3lease"
	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"
)

var (
	faultTrials  = flag.Int("faults.trials", 3, "trials of each fault of TestFaults")
	faultReadme  = flag.String("faults.readme", "", "the README whose faults table TestFaults writes, if any")
	faultCommand = flag.String("faults.command", "make e2e-s3", "the command named under the faults table")
)

const (
	// faultTTL is the TTL of the fault trials: a deadline 1.7 s after the
	// last confirmed write, renewals every 500 ms.
	faultTTL = 2 * time.Second
	// window is how long a fault lasts: two TTLs, in which a lease that
	// could not renew would have been lost.
	window = 2 * faultTTL
	// grantBound bounds the wait for B's grant after the fault ends.
	grantBound = 5 * faultTTL
	// atOnce bounds the trials that share the server at once.
	atOnce = 3
)

var faultCfg = s3lease.Config{Bucket: bucket, TTL: faultTTL}

// peerName says what A′ is, under the table.
const peerName = "the hand-written lockfile that Terraform's S3 backend uses (`use_lockfile`): a PutObject with If-None-Match: * to take, a DeleteObject to release, " +
	"no expiry and no renewal, so no loss is ever told; B′ tries the same PutObject every 20 ms"

// A fault is a row of the table: what it does to A's link or the server,
// and what undoes it.
type fault struct {
	faulttrial.Fault
	// ownServer: the fault acts on the server, so each trial runs on a
	// server of its own.
	ownServer bool
	// ahead is how far B's clock runs ahead of A's.
	ahead time.Duration
	// inject starts the fault and returns the func that ends it.
	inject func(t *testing.T, tr *trialEnv) (heal func())
}

// trialEnv is what a trial's fault acts on.
type trialEnv struct {
	srv *s3test.Server
	pa  *faultnet.Proxy // A's and A′'s link to the server
	key string
	op  *minio.Client
}

func faults() []fault {
	silent := func(t *testing.T, e *trialEnv) func() {
		e.pa.Drop(faultnet.Both)
		time.Sleep(window)
		return e.pa.Heal
	}
	return []fault{
		{Fault: faulttrial.Fault{Name: "versitygw killed, started again after 2 TTLs", Want: faulttrial.NoOverlap}, ownServer: true,
			inject: func(t *testing.T, e *trialEnv) func() {
				e.srv.Kill()
				time.Sleep(window)
				return func() {
					if err := e.srv.Restart(); err != nil {
						t.Error(err)
					}
				}
			}},
		{Fault: faulttrial.Fault{Name: "versitygw paused (SIGSTOP) for 2 TTLs", Want: faulttrial.NoOverlap}, ownServer: true,
			inject: func(t *testing.T, e *trialEnv) func() {
				e.srv.Pause()
				time.Sleep(window)
				return e.srv.Resume
			}},
		{Fault: faulttrial.Fault{Name: "A's link silent both ways for 2 TTLs", Want: faulttrial.NoOverlap}, inject: silent},
		{Fault: faulttrial.Fault{Name: "A's link slowed by 100 ms each way for 2 TTLs", Want: faulttrial.NoLoss},
			inject: func(t *testing.T, e *trialEnv) func() {
				e.pa.Delay(100 * time.Millisecond)
				time.Sleep(window)
				return e.pa.Heal
			}},
		{Fault: faulttrial.Fault{Name: "an operator deletes the lock object", Want: faulttrial.NoOverlap},
			inject: func(t *testing.T, e *trialEnv) func() {
				ctx := context.Background()
				for _, k := range []string{e.key, e.key + "-peer"} {
					if err := e.op.RemoveObject(ctx, bucket, k, minio.RemoveObjectOptions{}); err != nil {
						t.Error(err)
					}
				}
				return func() {}
			}},
		{Fault: faulttrial.Fault{Name: "an operator overwrites the lock object", Want: faulttrial.NoOverlap},
			inject: func(t *testing.T, e *trialEnv) func() {
				ctx := context.Background()
				body := []byte("maintenance")
				for _, k := range []string{e.key, e.key + "-peer"} {
					if _, err := e.op.PutObject(ctx, bucket, k, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
						t.Error(err)
					}
				}
				return func() {}
			}},
		{Fault: faulttrial.Fault{Name: "A's link silent, B's clock ahead by the ClockSkew (200 ms)", Want: faulttrial.NoOverlap},
			ahead: faultTTL / 10, inject: silent},
		{Fault: faulttrial.Fault{Name: "A's link silent, B's clock ahead by 3 × the ClockSkew (600 ms), beyond the rule", Want: faulttrial.Raced},
			ahead: 3 * faultTTL / 10, inject: silent},
	}
}

// TestFaults runs each fault faultTrials times: A holds the lease through
// a proxy, B waits in Lock on a client of its own, the fault starts, and
// the trial records whether A was lost, whether B was granted, and A's
// loss minus B's grant. A′ and B′, the hand-written lockfile, run beside
// them through the same links.
func TestFaults(t *testing.T) {
	book := &faulttrial.Book{Peer: peerName}
	for _, f := range faults() {
		t.Run(f.Name, func(t *testing.T) {
			n := *faultTrials
			if f.ownServer {
				for range n {
					book.Add(f.Fault, runTrial(t, f, startServer(t)))
				}
				return
			}
			faulttrial.Concurrently(n, atOnce, func(int) { book.Add(f.Fault, runTrial(t, f, shared)) })
		})
	}
	book.Check(t)
	table := book.Table(*faultCommand)
	t.Log("\n" + table)
	if *faultReadme != "" {
		if err := faulttrial.WriteTable(*faultReadme, table); err != nil {
			t.Error(err)
		}
	}
}

func runTrial(t *testing.T, f fault, srv *s3test.Server) faulttrial.Trial {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*window+2*grantBound)
	defer cancel()
	pa, err := faultnet.Listen(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	e := &trialEnv{srv: srv, pa: pa, key: keyName(t), op: s3test.Client(srv.Addr())}
	ca, cb := s3test.Client(pa.Addr()), s3test.Client(srv.Addr())
	a, err := faultCfg.Lock(ctx, ca, e.key)
	if err != nil {
		t.Fatalf("A's Lock = %v", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Unlock(uctx)
	}()
	peer := e.key + "-peer"
	if err := lockfile(ctx, ca, peer); err != nil {
		t.Fatalf("A′'s PutObject = %v", err)
	}
	// B's client probes the store before B waits, so that B has read A's
	// record when the fault comes: a Lock that never read it takes a
	// deleted object at once (the README's "When a lease is lost").
	warm, err := faultCfg.Lock(ctx, cb, e.key+"-warm")
	if err != nil {
		t.Fatalf("B's client's first Lock = %v", err)
	}
	warm.Unlock(ctx)
	aLost := faulttrial.StampWhen(a.Signal().Done())
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	b := lockAsync(bctx, s3lease.WithClockAhead(faultCfg, f.ahead), cb, e.key)
	bPeer := make(chan time.Time, 1)
	go func() {
		defer close(bPeer)
		for bctx.Err() == nil {
			if lockfile(bctx, cb, peer) == nil {
				bPeer <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second) // B reads A's record
	faultAt := time.Now()
	heal := f.inject(t, e)
	var g granted
	if f.Want == faulttrial.NoLoss {
		heal()
		time.Sleep(faultTTL)
		bcancel()
		g = <-b
	} else {
		select {
		case <-a.Signal().Done():
		case <-time.After(grantBound):
		}
		heal()
		select {
		case g = <-b:
		case <-time.After(grantBound):
			bcancel()
			g = <-b
		}
	}
	bcancel()
	if g.err == nil {
		defer g.l.Unlock(context.Background())
	}
	var tr faulttrial.Trial
	at, lost := aLost.Stop()
	tr.Lost, tr.Granted = lost, g.err == nil
	if lost {
		tr.Detection = at.Sub(faultAt)
		tr.Cause = fmt.Sprint(a.Signal().Err())
	}
	if lost && tr.Granted {
		tr.Overlap = at.Sub(g.at)
	}
	p := &faulttrial.Peer{}
	if bt, ok := <-bPeer; ok {
		p.Granted = true // A′ is never told: it is still live after B′'s grant
		_ = bt
	}
	tr.Peer = p
	ectx, ecancel := context.WithTimeout(context.Background(), 5*time.Second)
	e.op.RemoveObject(ectx, bucket, peer, minio.RemoveObjectOptions{})
	ecancel()
	return tr
}

// lockfile is the hand-written lock: a PutObject of the lock file with
// If-None-Match: *.
func lockfile(ctx context.Context, c *minio.Client, key string) error {
	body := []byte(fmt.Sprintf(`{"ID":"%d","Operation":"apply"}`, time.Now().UnixNano()))
	opts := minio.PutObjectOptions{DisableMultipart: true}
	opts.SetMatchETagExcept("*")
	_, err := c.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), opts)
	return err
}
