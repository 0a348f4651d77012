package k8slease_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/k8slease"
)

// exampleConfig returns the configuration of the apiserver the tests start;
// a program in a pod uses rest.InClusterConfig.
func exampleConfig() *rest.Config { return shared.Config() }

// Two workers take the Lease "example-orders" through Lockers of their own
// identities: the second's TryLock is refused while the first holds it,
// and granted, with a larger token, once the first releases it.
func ExampleNewLocker() {
	cs, err := kubernetes.NewForConfig(exampleConfig())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	a := k8slease.NewLocker(cs, "default", "worker-a", k8slease.Config{})
	b := k8slease.NewLocker(cs, "default", "worker-b", k8slease.Config{})

	held, err := a.Lock(ctx, "example-orders")
	if err != nil {
		log.Fatal(err)
	}
	sig := held.Signal()
	if err := sig.Err(); err != nil { // before each write
		log.Fatal(err)
	}
	fmt.Println("worker-a holds it:", sig.Err() == nil)

	_, err = b.TryLock(ctx, "example-orders")
	fmt.Println("worker-b refused:", errors.Is(err, lease.ErrHeld))

	if err := held.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	next, err := b.TryLock(ctx, "example-orders")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Unlock(ctx)
	fmt.Println("worker-b takes it, with a larger token:", next.Token() > held.Token())
	// Output:
	// worker-a holds it: true
	// worker-b refused: true
	// worker-b takes it, with a larger token: true
}
