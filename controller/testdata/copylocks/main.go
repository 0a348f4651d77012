// Command copylocks copies a Controller and a Signal after first use, which
// go vet must report; TestVetReportsCopies runs go vet on it.
package main

import (
	"fmt"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

func main() {
	c := controller.New("orders")
	sig := c.Signal()
	sig.Err()

	controllerCopy := *c
	signalCopy := *sig
	report(controllerCopy, signalCopy)
}

func report(c controller.Controller, s signal.Signal) {
	fmt.Println(c.Subject(), s.Err())
}
