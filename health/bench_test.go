package health_test

import (
	"errors"
	"testing"
	"time"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/health"
)

var errBench = errors.New("key deleted")

// BenchmarkNotify measures what an issuer's renewal and loss paths pay for
// the observer beside the same path without it: /bare is the path alone,
// /nil the path with the Notify call and no observer.
func BenchmarkNotify(b *testing.B) {
	var o health.Observer // nil, as in a Config that sets none
	b.Run("renew/bare", func(b *testing.B) {
		b.ReportAllocs()
		var dl time.Time
		for b.Loop() {
			sent := t0
			dl = sent.Add(9 * time.Second) // what a renewal's confirmation computes
		}
		_ = dl
	})
	b.Run("renew/nil", func(b *testing.B) {
		b.ReportAllocs()
		var dl time.Time
		for b.Loop() {
			sent := t0
			dl = sent.Add(9 * time.Second)
			if o != nil {
				health.NotifyRenewed(o, health.Event{Issuer: "bench", Subject: "orders", Sent: sent, Deadline: dl}, sent)
			}
		}
		_ = dl
	})
	b.Run("lose/bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := controller.New("orders")
			c.Lose(errBench)
		}
	})
	b.Run("lose/nil", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := controller.New("orders")
			if c.Lose(errBench) && o != nil {
				health.NotifyLost(o, health.Event{Issuer: "bench", Subject: "orders", Err: c.Signal().Err(), Via: health.Push})
			}
		}
	})
	b.Run("lose/notify-nil", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := controller.New("orders")
			if c.Lose(errBench) {
				health.NotifyLost(o, health.Event{Issuer: "bench", Subject: "orders", Err: errBench, Via: health.Push})
			}
		}
	})
}
