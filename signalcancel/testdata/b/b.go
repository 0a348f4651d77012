// Calls the analyzer must not report: a Context method of another type,
// package context's own funcs (go vet's lostcancel reports those), and
// main.main, whose return ends the process.
package main

import (
	"context"

	"github.com/zukhruf/lease/controller"
)

type notASignal struct{}

func (notASignal) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	return ctx, func() {}
}

func _() {
	_, _ = notASignal{}.Context(context.Background())
	_, cancel := notASignal{}.Context(context.Background())
	if false {
		cancel()
	}
}

func main() {
	sig := controller.New("orders").Signal()
	_, cancel := sig.Context(context.Background())
	if false {
		cancel()
	}
}
