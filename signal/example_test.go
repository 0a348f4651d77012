package signal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/lost"
)

// A holder checks Err before each write: the lease may have been lost since
// the last one.
func ExampleSignal_Err() {
	c := controller.New("orders")
	sig := c.Signal()

	write := func(batch int) error {
		if err := sig.Err(); err != nil {
			return fmt.Errorf("batch %d: %w", batch, err)
		}
		fmt.Println("wrote batch", batch)
		return nil
	}

	for batch := 1; batch <= 3; batch++ {
		if batch == 3 {
			c.Lose(errors.New("the coordinator refused the claim"))
		}
		if err := write(batch); err != nil {
			var le *lost.Error
			fmt.Println(errors.As(err, &le), le.Subject())
			fmt.Println(err)
		}
	}
	// Output:
	// wrote batch 1
	// wrote batch 2
	// true orders
	// batch 3: lease lost: orders: the coordinator refused the claim
}

// A holder that waits for work waits for the loss too.
func ExampleSignal_Done() {
	c := controller.New("leader/shard-7")
	sig := c.Signal()
	work := make(chan string)

	go c.Lose(errors.New("session expired"))

	for {
		select {
		case job := <-work:
			fmt.Println("doing", job)
		case <-sig.Done():
			fmt.Println("stopped:", sig.Err())
			return
		}
	}
	// Output:
	// stopped: lease lost: leader/shard-7: session expired
}

// Context gives the lease to every call that takes a context: a loss cuts the
// call, and context.Cause says why.
func ExampleSignal_Context() {
	c := controller.New("orders")
	sig := c.Signal()

	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.Lose(errors.New("the coordinator refused the claim")) // lost while the request is in flight
		<-r.Context().Done()
	}))
	defer server.Close()

	ctx, cancel := sig.Context(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, server.URL, nil)
	_, err := server.Client().Do(req)

	fmt.Println("request cut:", err != nil)
	fmt.Println("ctx.Err():", ctx.Err())
	fmt.Println("cause:", context.Cause(ctx))
	// Output:
	// request cut: true
	// ctx.Err(): context canceled
	// cause: lease lost: orders: the coordinator refused the claim
}

// AfterLoss runs clean-up once the lease is lost; stop cancels it.
func ExampleSignal_AfterLoss() {
	c := controller.New("orders")
	sig := c.Signal()

	flushed := make(chan struct{})
	sig.AfterLoss(func() {
		fmt.Println("dropping buffered rows:", sig.Err())
		close(flushed)
	})
	stop := sig.AfterLoss(func() { fmt.Println("never printed") })
	fmt.Println("stopped:", stop())

	c.Lose(nil)
	<-flushed
	// Output:
	// stopped: true
	// dropping buffered rows: lease lost: orders
}

// A release is not a loss: the holder that ends its lease sees no error.
func ExampleSignal_String() {
	c := controller.New("orders")
	sig := c.Signal()
	fmt.Println(sig)
	c.End()
	c.Lose(errors.New("late")) // the issuer saw the loss after the release
	fmt.Println(sig, sig.Err())
	// Output:
	// signal.Signal("orders", live)
	// signal.Signal("orders", ended) <nil>
}
