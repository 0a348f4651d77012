package ctrllease

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/lost"
	"github.com/zukhruf/lease/signal"
)

// GateClient returns a client whose writes (Create, Update, Patch, Apply,
// Delete, DeleteAllOf, and their forms through Status and SubResource)
// return sig's *lost.Error, without a request, once sig is lost; reads pass
// through to c. A write made before the loss runs with a context that the
// loss cuts as well, so a request still under way when the lease is lost is
// abandoned; the apiserver may have applied it all the same: only a fencing
// token protects a resource from a holder that lost its lease.
//
// A released lease ([signal.Signal.Err] nil after a release) does not gate
// writes. GateClient panics if c or sig is nil.
func GateClient(c client.Client, sig *signal.Signal) client.Client {
	if isNil(c) {
		panic("ctrllease: GateClient called with a nil client")
	}
	if sig == nil {
		panic("ctrllease: GateClient called with a nil signal")
	}
	return &gatedClient{Client: c, sig: sig}
}

// gateLease returns the client of a term: gated by the lease's signal, and
// by its deadline, read before each write, so that a process that was
// paused past the deadline refuses a write before the lease's timer has
// run and lost the signal.
func gateLease(c client.Client, l *k8slease.Lease, subject string) client.Client {
	sig := l.Signal()
	past := func() error {
		if time.Now().Before(l.Deadline()) {
			return nil
		}
		if err := sig.Err(); err != nil {
			return err // the timer ran meanwhile
		}
		return lost.New(subject, errPastDeadline)
	}
	return &gatedClient{Client: c, sig: sig, past: past}
}

// gatedClient is a client.Client whose writes stop at the loss of sig.
type gatedClient struct {
	client.Client
	sig  *signal.Signal
	past func() error // nil: the signal alone gates; else the lease's error once past its deadline
}

// errPastDeadline is the cause of a write refused at the deadline of a
// term's lease before its signal was lost.
var errPastDeadline = errors.New("ctrllease: the lease's deadline has passed")

// write runs do with a context that the loss of the lease cuts, unless the
// lease is already lost or past its deadline.
func (g *gatedClient) write(ctx context.Context, do func(context.Context) error) error {
	return gatedWrite(ctx, g.sig, g.past, do)
}

func gatedWrite(ctx context.Context, sig *signal.Signal, past func() error, do func(context.Context) error) error {
	if err := sig.Err(); err != nil {
		return err
	}
	if past != nil {
		if err := past(); err != nil {
			return err
		}
	}
	ctx, cancel := sig.Context(ctx)
	defer cancel()
	return do(ctx)
}

func (g *gatedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.Client.Apply(ctx, obj, opts...) })
}

func (g *gatedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.Client.Create(ctx, obj, opts...) })
}

func (g *gatedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.Client.Delete(ctx, obj, opts...) })
}

func (g *gatedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.Client.Update(ctx, obj, opts...) })
}

func (g *gatedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.Client.Patch(ctx, obj, patch, opts...) })
}

func (g *gatedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.Client.DeleteAllOf(ctx, obj, opts...) })
}

func (g *gatedClient) Status() client.SubResourceWriter {
	return &gatedWriter{w: g.Client.Status(), sig: g.sig, past: g.past}
}

func (g *gatedClient) SubResource(subResource string) client.SubResourceClient {
	c := g.Client.SubResource(subResource)
	return &gatedSubResource{SubResourceReader: c, gatedWriter: gatedWriter{w: c, sig: g.sig, past: g.past}}
}

// gatedWriter is a client.SubResourceWriter whose writes stop at the loss
// of sig.
type gatedWriter struct {
	w    client.SubResourceWriter
	sig  *signal.Signal
	past func() error
}

func (g *gatedWriter) write(ctx context.Context, do func(context.Context) error) error {
	return gatedWrite(ctx, g.sig, g.past, do)
}

func (g *gatedWriter) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.w.Create(ctx, obj, sub, opts...) })
}

func (g *gatedWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.w.Update(ctx, obj, opts...) })
}

func (g *gatedWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.w.Patch(ctx, obj, patch, opts...) })
}

func (g *gatedWriter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return g.write(ctx, func(ctx context.Context) error { return g.w.Apply(ctx, obj, opts...) })
}

// gatedSubResource is a client.SubResourceClient whose reads pass and whose
// writes stop at the loss of sig.
type gatedSubResource struct {
	client.SubResourceReader
	gatedWriter
}
