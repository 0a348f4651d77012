package health_test

import (
	"fmt"
	"time"

	"github.com/zukhruf/lease/health"
)

func ExampleObserverFunc() {
	o := health.ObserverFunc(func(e health.Event) {
		fmt.Printf("%s %s: margin %v\n", e.Kind, e.Subject, e.Margin)
	})
	sent := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	// A renewal that set a deadline 9 s after its send and was confirmed 7 s
	// after it: 2 s left, less than a third of 9 s.
	health.NotifyRenewed(o, health.Event{Subject: "orders", Sent: sent, Deadline: sent.Add(9 * time.Second)}, sent.Add(7*time.Second))
	// Output:
	// renewed orders: margin 2s
	// at_risk orders: margin 2s
}

func ExampleThin() {
	fmt.Println(health.Thin(4*time.Second, 9*time.Second), health.Thin(2*time.Second, 9*time.Second))
	// Output: false true
}
