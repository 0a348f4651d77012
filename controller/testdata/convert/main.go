// Command convert is a holder that tries to turn its signals, a lease's and a
// merged one, into controllers, so as to end or lose them itself. None of the
// conversions may compile; TestHolderCannotConvert builds it and checks that
// the compiler refuses each one.
package main

import (
	"fmt"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/signal"
)

func main() {
	issuer := controller.New("orders")
	sig := issuer.Signal()
	merged, release := signal.Any(sig, controller.New("shard/7").Signal())
	defer release()

	forgedEnd := (*controller.Controller)(sig)
	forgedLose := (*controller.Controller)(merged)
	forgedValue := controller.Controller(*sig)
	fmt.Println(forgedEnd.End(), forgedLose.Lose(nil), forgedValue.Subject())
}
