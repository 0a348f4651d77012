package signal_test

import (
	"errors"
	"fmt"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

// A holder that needs two leases at once, the lock of a key and the
// leadership of its shard, works under one merged signal and defers its
// release.
func ExampleAny() {
	lock := controller.New("orders/42")
	leader := controller.New("leader/shard-7")

	sig, release := signal.Any(lock.Signal(), leader.Signal())
	defer release()

	for batch := 1; batch <= 3; batch++ {
		if batch == 3 {
			leader.Lose(errors.New("session expired"))
			lock.Lose(errors.New("key deleted")) // too late: the first loss wins
		}
		if err := sig.Err(); err != nil {
			var le *lost.Error
			errors.As(err, &le)
			fmt.Println("stopped: lost", le.Subject())
			fmt.Println("because", le.Unwrap())
			break
		}
		fmt.Println("wrote batch", batch)
	}
	// Output:
	// wrote batch 1
	// wrote batch 2
	// stopped: lost leader/shard-7
	// because session expired
}

// Releasing the merged signal takes it off its sources, which live on: a
// long-lived lease keeps nothing of the merged signals made from it.
func ExampleAny_release() {
	leader := controller.New("leader/shard-7")

	for job := 1; job <= 2; job++ {
		lock := controller.New(fmt.Sprintf("job/%d", job))
		sig, release := signal.Any(leader.Signal(), lock.Signal())
		fmt.Println(sig)
		release()
		lock.End()
		fmt.Println(sig)
	}
	leader.Lose(errors.New("session expired")) // reaches no released signal
	fmt.Println(leader.Signal())
	// Output:
	// signal.Signal("leader/shard-7, job/1", live)
	// signal.Signal("leader/shard-7, job/1", ended)
	// signal.Signal("leader/shard-7, job/2", live)
	// signal.Signal("leader/shard-7, job/2", ended)
	// signal.Signal("leader/shard-7", lost: session expired)
}
