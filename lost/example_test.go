package lost_test

import (
	"errors"
	"fmt"

	"github.com/zukhruf/lease/lost"
)

// A holder finds the loss with errors.As, however deep it was wrapped, and
// the issuer's cause with errors.Is.
func ExampleError() {
	errRefused := errors.New("the coordinator refused the claim")
	err := fmt.Errorf("copy rows: batch 3: %w", lost.New("orders", errRefused))

	var le *lost.Error
	if errors.As(err, &le) {
		fmt.Println("lost the lease on", le.Subject())
		fmt.Println("because", le.Unwrap())
	}
	fmt.Println(errors.Is(err, errRefused))
	// Output:
	// lost the lease on orders
	// because the coordinator refused the claim
	// true
}

// New makes the holder's view of a loss; a test of a holder can use it
// without an issuer.
func ExampleNew() {
	fmt.Println(lost.New("orders", nil))
	fmt.Println(lost.New("orders", errors.New("session expired")))
	// Output:
	// lease lost: orders
	// lease lost: orders: session expired
}
