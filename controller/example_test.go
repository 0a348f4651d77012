package controller_test

import (
	"errors"
	"fmt"

	"github.com/zukhruf/lease/controller"
)

// An issuer makes a Controller when it grants a lease and hands the holder
// only the signal.
func ExampleNew() {
	c := controller.New("orders")
	sig := c.Signal() // give this to the holder; keep c

	fmt.Println(c.Subject(), sig.Err())
	// Output:
	// orders <nil>
}

// The issuer loses the lease when it learns the holder lost the right; the
// first loss wins.
func ExampleController_Lose() {
	c := controller.New("orders")
	sig := c.Signal()

	fmt.Println(c.Lose(errors.New("the coordinator refused the claim")))
	fmt.Println(c.Lose(errors.New("session closed")))
	fmt.Println(sig.Err())
	// Output:
	// true
	// false
	// lease lost: orders: the coordinator refused the claim
}

// End records the holder's release. A loss the issuer sees later does not
// reach the holder.
func ExampleController_End() {
	c := controller.New("orders")
	sig := c.Signal()

	fmt.Println(c.End())
	fmt.Println(c.Lose(errors.New("session closed")))
	fmt.Println(sig.Err(), c)
	// Output:
	// true
	// false
	// <nil> controller.Controller("orders", ended)
}
