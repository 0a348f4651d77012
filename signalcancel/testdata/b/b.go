// The cases of go vet's lostcancel testdata
// (go/analysis/passes/lostcancel/testdata/src/b/b.go), with Signal.Context
// in place of context.WithCancel, and a Context method of another type,
// which the analyzer must not report.
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

// Return from main is handled specially.
// Since the program exits, there's no need to call cancel.
func main() {
	sig := controller.New("orders").Signal()
	_, cancel := sig.Context(context.Background())
	if maybe {
		cancel()
	}
}

func notMain() {
	sig := controller.New("orders").Signal()
	_, cancel := sig.Context(context.Background()) // want "cancel function.*not used"

	if maybe {
		cancel()
	}
} // want "return statement.*reached without using the cancel"

var maybe bool
