package ctrllease_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/zukhruf/lease/controller"
	"github.com/zukhruf/lease/issuers/ctrllease"
	"github.com/zukhruf/lease/lost"
)

// recorder is a client.Client that counts the calls that reach it and
// answers each with nil; the methods it does not have panic.
type recorder struct {
	client.Client
	writes, reads int
	during        func()  // called inside each write, if set
	causes        []error // context.Cause of each write's context, after during
}

func (r *recorder) write(ctx context.Context) error {
	r.writes++
	if r.during != nil {
		r.during()
	}
	r.causes = append(r.causes, context.Cause(ctx))
	return nil
}

func (r *recorder) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	r.reads++
	return nil
}

func (r *recorder) List(context.Context, client.ObjectList, ...client.ListOption) error {
	r.reads++
	return nil
}

func (r *recorder) Apply(ctx context.Context, _ runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
	return r.write(ctx)
}

func (r *recorder) Create(ctx context.Context, _ client.Object, _ ...client.CreateOption) error {
	return r.write(ctx)
}

func (r *recorder) Update(ctx context.Context, _ client.Object, _ ...client.UpdateOption) error {
	return r.write(ctx)
}

func (r *recorder) Patch(ctx context.Context, _ client.Object, _ client.Patch, _ ...client.PatchOption) error {
	return r.write(ctx)
}

func (r *recorder) Delete(ctx context.Context, _ client.Object, _ ...client.DeleteOption) error {
	return r.write(ctx)
}

func (r *recorder) DeleteAllOf(ctx context.Context, _ client.Object, _ ...client.DeleteAllOfOption) error {
	return r.write(ctx)
}

func (r *recorder) Status() client.SubResourceWriter { return &subRecorder{r} }

func (r *recorder) SubResource(string) client.SubResourceClient { return &subRecorder{r} }

type subRecorder struct{ r *recorder }

func (s *subRecorder) Get(context.Context, client.Object, client.Object, ...client.SubResourceGetOption) error {
	s.r.reads++
	return nil
}

func (s *subRecorder) Create(ctx context.Context, _, _ client.Object, _ ...client.SubResourceCreateOption) error {
	return s.r.write(ctx)
}

func (s *subRecorder) Update(ctx context.Context, _ client.Object, _ ...client.SubResourceUpdateOption) error {
	return s.r.write(ctx)
}

func (s *subRecorder) Patch(ctx context.Context, _ client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
	return s.r.write(ctx)
}

func (s *subRecorder) Apply(ctx context.Context, _ runtime.ApplyConfiguration, _ ...client.SubResourceApplyOption) error {
	return s.r.write(ctx)
}

// writes calls every write form of c once and returns their errors.
func writes(c client.Client) []error {
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	patch := client.MergeFrom(cm)
	return []error{
		c.Create(ctx, cm),
		c.Update(ctx, cm),
		c.Patch(ctx, cm, patch),
		c.Apply(ctx, nil),
		c.Delete(ctx, cm),
		c.DeleteAllOf(ctx, cm),
		c.Status().Create(ctx, cm, cm),
		c.Status().Update(ctx, cm),
		c.Status().Patch(ctx, cm, patch),
		c.Status().Apply(ctx, nil),
		c.SubResource("scale").Create(ctx, cm, cm),
		c.SubResource("scale").Update(ctx, cm),
		c.SubResource("scale").Patch(ctx, cm, patch),
		c.SubResource("scale").Apply(ctx, nil),
	}
}

func reads(c client.Client) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	_ = c.Get(ctx, client.ObjectKey{}, cm)
	_ = c.List(ctx, &corev1.ConfigMapList{})
	_ = c.SubResource("scale").Get(ctx, cm, cm)
}

func TestGateClient(t *testing.T) {
	rec := &recorder{}
	ctrl := controller.New("default/gate")
	gated := ctrllease.GateClient(rec, ctrl.Signal())

	for i, err := range writes(gated) {
		if err != nil {
			t.Fatalf("write %d before the loss: %v", i, err)
		}
	}
	if rec.writes != 14 {
		t.Fatalf("%d writes reached the client before the loss, want 14", rec.writes)
	}
	for i, c := range rec.causes {
		if c != nil {
			t.Fatalf("write %d before the loss had a context done with %v", i, c)
		}
	}

	// The loss comes while a write is under way: its context is cut.
	cause := errors.New("taken over")
	rec.during = func() { ctrl.Lose(cause) }
	if err := gated.Create(context.Background(), &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	rec.during = nil
	var le *lost.Error
	if got := rec.causes[len(rec.causes)-1]; !errors.As(got, &le) || !errors.Is(got, cause) {
		t.Fatalf("a write under way at the loss had its context done with %v, want the *lost.Error", got)
	}
	for i, err := range writes(gated) {
		var le *lost.Error
		if !errors.As(err, &le) || !errors.Is(err, cause) || le.Subject() != "default/gate" {
			t.Errorf("write %d after the loss = %v, want the signal's *lost.Error", i, err)
		}
	}
	if rec.writes != 15 {
		t.Fatalf("%d writes reached the client after the loss, want none", rec.writes-15)
	}
	reads(gated)
	if rec.reads != 3 {
		t.Fatalf("%d reads reached the client after the loss, want 3", rec.reads)
	}
}

func TestGateClientPassesAfterRelease(t *testing.T) {
	rec := &recorder{}
	ctrl := controller.New("default/gate")
	gated := ctrllease.GateClient(rec, ctrl.Signal())
	ctrl.End()
	ctrl.Lose(errors.New("late"))
	for i, err := range writes(gated) {
		if err != nil {
			t.Fatalf("write %d after the release: %v", i, err)
		}
	}
}

func TestGateClientNil(t *testing.T) {
	for name, call := range map[string]func(){
		"nil client": func() { ctrllease.GateClient(nil, controller.New("x").Signal()) },
		"nil signal": func() { ctrllease.GateClient(&recorder{}, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p == nil {
					t.Fatal("no panic")
				}
			}()
			call()
		})
	}
}
