// Command demo holds a redislease lease on a real redis-server through a
// proxy, lets it renew, then slows the link until each round trip takes 80%
// of the deadline span: it prints the margin of each renewal, the at-risk
// warning, and the loss that follows it.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/health/internal/healthtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	r, err := healthtest.StartRedis()
	if err != nil {
		return err
	}
	defer r.Stop()
	start := time.Now()
	at := func() string { return fmt.Sprintf("%6.3fs", time.Since(start).Seconds()) }
	print := health.ObserverFunc(func(e health.Event) {
		switch e.Kind {
		case health.Granted:
			fmt.Printf("%s  granted   %s, token %d, after %v\n", at(), e.Subject, e.Token, e.Wait.Round(time.Microsecond))
		case health.Renewed:
			fmt.Printf("%s  renewed   round trip %v, margin %v of %v\n", at(), e.RoundTrip.Round(time.Millisecond), e.Margin.Round(time.Millisecond), e.Deadline.Sub(e.Sent))
		case health.RenewalFailed:
			fmt.Printf("%s  failed    %v, %v left\n", at(), e.Err, e.Margin.Round(time.Millisecond))
		case health.AtRisk:
			fmt.Printf("%s  AT RISK   %v left before the deadline: %v\n", at(), e.Margin.Round(time.Millisecond), e.Err)
		case health.Lost:
			fmt.Printf("%s  lost      via %v: %v\n", at(), e.Via, e.Err)
		case health.Released:
			fmt.Printf("%s  released\n", at())
		}
	})
	fmt.Printf("a lease with a 1 s TTL (deadline 900 ms after each renewal's send) on redis-server %s\n", r.Addr)
	fmt.Println("after 3 renewals the link is slowed: 360 ms each way, a round trip of 80% of the 900 ms span")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = healthtest.SlowedRun(ctx, r.Addr, "demo-health", 3, 0.8, print)
	return err
}
