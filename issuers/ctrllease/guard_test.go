package ctrllease

import (
	"context"
	"reflect"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestGuardReconciler builds a controller as the builder does and guards
// it as a term's Add does: a Reconcile called with a context already done
// (a worker that took an item after the term ended) does not reach the
// reconciler; one with a live context does. It also pins the layout of
// controller-runtime's controller that the guard relies on: if the field
// moves, this fails, not the users.
func TestGuardReconciler(t *testing.T) {
	calls := 0
	inner := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		calls++
		return reconcile.Result{}, nil
	})
	skip := true
	c, err := controller.NewUnmanaged("guarded", controller.Options{Reconciler: inner, SkipNameValidation: &skip})
	if err != nil {
		t.Fatal(err)
	}
	guardReconciler(c)
	guardReconciler(c) // once is enough: a second call does not wrap again
	do := reflect.ValueOf(c).Elem().FieldByName("Do").Interface().(reconcile.Reconciler)
	g, ok := do.(guard)
	if !ok {
		t.Fatalf("the controller's reconciler is %T, want the guard", do)
	}
	if _, ok := g.r.(guard); ok {
		t.Fatal("the guard was wrapped twice")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	do.Reconcile(ended, reconcile.Request{})
	if calls != 0 {
		t.Fatal("a Reconcile with a done context reached the reconciler")
	}
	do.Reconcile(context.Background(), reconcile.Request{})
	if calls != 1 {
		t.Fatalf("a Reconcile with a live context reached the reconciler %d times, want 1", calls)
	}
}
