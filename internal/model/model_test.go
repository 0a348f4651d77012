package model_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/zukhruf/lease/internal/model"
)

// TestModel pins the specification itself: the rules of a lease written as
// sequences of calls and the state each leaves.
func TestModel(t *testing.T) {
	type step struct {
		call string // Lose1, Lose2, End, AfterLoss, Stop0
		want bool   // its result; AfterLoss has none
	}
	tests := []struct {
		name  string
		steps []step
		want  model.Lease
	}{
		{"new lease is live", nil, model.Lease{}},
		{"first loss wins", []step{{"Lose1", true}, {"Lose2", false}}, model.Lease{Phase: model.Lost, Cause: 1}},
		{"end blocks lose", []step{{"End", true}, {"Lose1", false}, {"End", false}}, model.Lease{Phase: model.Ended}},
		{"end keeps the loss", []step{{"Lose1", true}, {"End", false}}, model.Lease{Phase: model.Lost, Cause: 1}},
		{"loss starts callbacks", []step{{"AfterLoss", false}, {"Lose2", true}, {"Stop0", false}},
			model.Lease{Phase: model.Lost, Cause: 2, Callbacks: []model.Callback{model.Started}}},
		{"callback after the loss starts at once", []step{{"Lose1", true}, {"AfterLoss", false}},
			model.Lease{Phase: model.Lost, Cause: 1, Callbacks: []model.Callback{model.Started}}},
		{"stop keeps a callback from running", []step{{"AfterLoss", false}, {"Stop0", true}, {"Stop0", false}, {"Lose1", true}},
			model.Lease{Phase: model.Lost, Cause: 1, Callbacks: []model.Callback{model.Stopped}}},
		{"end drops callbacks", []step{{"AfterLoss", false}, {"End", true}, {"Stop0", false}, {"AfterLoss", false}},
			model.Lease{Phase: model.Ended, Callbacks: []model.Callback{model.Dropped, model.Dropped}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l model.Lease
			for _, s := range tt.steps {
				var got bool
				switch s.call {
				case "Lose1":
					got = l.Lose(1)
				case "Lose2":
					got = l.Lose(2)
				case "End":
					got = l.End()
				case "AfterLoss":
					l.AfterLoss()
				case "Stop0":
					got = l.Stop(0)
				}
				if got != s.want {
					t.Fatalf("%s = %v, want %v", s.call, got, s.want)
				}
			}
			if diff := cmp.Diff(tt.want, l); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			lost, cause := l.Err()
			if lost != (l.Phase == model.Lost) || lost != l.DoneClosed() || (lost && cause != tt.want.Cause) {
				t.Errorf("Err() = %v, %v and DoneClosed() = %v in phase %v", lost, cause, l.DoneClosed(), l.Phase)
			}
			if c := l.Clone(); len(c.Callbacks) > 0 {
				c.Stop(0)
				c.Callbacks[0] = model.Pending
				if diff := cmp.Diff(tt.want, l); diff != "" {
					t.Errorf("changing a clone changed the original (-want +got):\n%s", diff)
				}
			}
		})
	}
}
