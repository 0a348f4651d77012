package controller_test

import (
	"errors"
	"testing"

	"github.com/zukhruf/lease/controller"
)

var errRefused = errors.New("the coordinator refused the claim")

func TestSignalIsTheSameLease(t *testing.T) {
	c := controller.New("orders")
	if a, b := c.Signal(), c.Signal(); a != b {
		t.Error("Signal() returned two different signals, want the same one")
	}
	if got := c.Subject(); got != "orders" {
		t.Errorf("Subject() = %q, want %q", got, "orders")
	}
}

// Lose and End report whether the call moved the lease, in every order.
func TestLoseAndEndResults(t *testing.T) {
	lose := func(c *controller.Controller) bool { return c.Lose(errRefused) }
	end := func(c *controller.Controller) bool { return c.End() }
	for _, tc := range []struct {
		name    string
		calls   []func(*controller.Controller) bool
		want    []bool
		wantErr bool
	}{
		{"Lose", []func(*controller.Controller) bool{lose}, []bool{true}, true},
		{"End", []func(*controller.Controller) bool{end}, []bool{true}, false},
		{"Lose Lose", []func(*controller.Controller) bool{lose, lose}, []bool{true, false}, true},
		{"Lose End", []func(*controller.Controller) bool{lose, end}, []bool{true, false}, true},
		{"End Lose", []func(*controller.Controller) bool{end, lose}, []bool{true, false}, false},
		{"End End", []func(*controller.Controller) bool{end, end}, []bool{true, false}, false},
		{"End Lose End", []func(*controller.Controller) bool{end, lose, end}, []bool{true, false, false}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := controller.New("orders")
			for i, call := range tc.calls {
				if got := call(c); got != tc.want[i] {
					t.Errorf("call %d = %v, want %v", i+1, got, tc.want[i])
				}
			}
			if got := c.Signal().Err() != nil; got != tc.wantErr {
				t.Errorf("Err() != nil is %v, want %v", got, tc.wantErr)
			}
		})
	}
}

// The zero Controller is a live lease on the empty subject, and New("") is
// the same lease.
func TestZeroController(t *testing.T) {
	var zero controller.Controller
	for name, c := range map[string]*controller.Controller{"zero": &zero, `New("")`: controller.New("")} {
		t.Run(name, func(t *testing.T) {
			if got := c.Subject(); got != "" {
				t.Errorf("Subject() = %q, want empty", got)
			}
			if err := c.Signal().Err(); err != nil {
				t.Errorf("Err() = %v, want nil", err)
			}
			if !c.Lose(errRefused) {
				t.Fatal("Lose() = false, want true")
			}
			if got, want := c.Signal().Err().Error(), "lease lost: the coordinator refused the claim"; got != want {
				t.Errorf("Err() = %q, want %q", got, want)
			}
		})
	}
}

// String names the type, the subject and the state, for logs.
func TestString(t *testing.T) {
	for _, tc := range []struct {
		name       string
		do         func(*controller.Controller)
		controller string
		signal     string
	}{
		{"live", func(*controller.Controller) {}, `controller.Controller("orders", live)`, `signal.Signal("orders", live)`},
		{"lost", func(c *controller.Controller) { c.Lose(errRefused) },
			`controller.Controller("orders", lost: the coordinator refused the claim)`,
			`signal.Signal("orders", lost: the coordinator refused the claim)`},
		{"lost without cause", func(c *controller.Controller) { c.Lose(nil) }, `controller.Controller("orders", lost)`, `signal.Signal("orders", lost)`},
		{"ended", func(c *controller.Controller) { c.End() }, `controller.Controller("orders", ended)`, `signal.Signal("orders", ended)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := controller.New("orders")
			tc.do(c)
			if got := c.String(); got != tc.controller {
				t.Errorf("Controller.String() = %s, want %s", got, tc.controller)
			}
			if got := c.Signal().String(); got != tc.signal {
				t.Errorf("Signal.String() = %s, want %s", got, tc.signal)
			}
		})
	}
}
