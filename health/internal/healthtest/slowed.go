package healthtest

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/issuers/redislease"
)

// SlowedTTL is the TTL of the holder of a slowed-link run: its deadline
// span is TTL less the default margin of a tenth, 900 ms.
const SlowedTTL = time.Second

// SlowedRun holds a redislease lease through a proxy to addr, lets it renew
// for renewals confirmed renewals, then delays every byte of the link by
// half of share of the deadline span each way (a round trip of share of
// the span), and waits for the loss. Each event goes to o (a nil o is
// allowed) and to the returned list, in order.
func SlowedRun(ctx context.Context, addr, key string, renewals int, share float64, o health.Observer) ([]health.Event, error) {
	proxy, err := faultnet.Listen(addr)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	defer rdb.Close()
	rec := &recorder{next: o, renewed: make(chan struct{}, 64)}
	cfg := redislease.Config{TTL: SlowedTTL, Observer: rec}
	l, err := cfg.Lock(ctx, rdb, key)
	if err != nil {
		return nil, err
	}
	defer l.Unlock(context.Background())
	for range renewals {
		select {
		case <-rec.renewed:
		case <-ctx.Done():
			return rec.all(), ctx.Err()
		}
	}
	span := SlowedTTL - SlowedTTL/10
	proxy.Delay(time.Duration(share * float64(span) / 2))
	select {
	case <-l.Signal().Done():
	case <-ctx.Done():
		return rec.all(), fmt.Errorf("the lease was not lost: %w", ctx.Err())
	}
	proxy.Heal()
	// The loss is reported right after the signal is lost.
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(5 * time.Millisecond) {
		if es := rec.all(); len(es) > 0 && es[len(es)-1].Kind == health.Lost {
			return es, nil
		}
	}
	return rec.all(), fmt.Errorf("no Lost event after the loss")
}
