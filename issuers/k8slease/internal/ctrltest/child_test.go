package ctrltest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/zukhruf/lease/issuers/ctrllease"
	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

// childReplica is a ctrllease replica in a process of its own, for a test
// that pauses it with SIGSTOP: arguments Lease name, ConfigMap name,
// identity. It tells the parent of its setups and of its writer's spans as
// events ("setup TERM", "begin TERM", "write TERM", "end TERM CAUSE"), and
// stops when its standard input ends or reads "stop".
func childReplica(c *kubetest.Child) error {
	if len(c.Args) != 3 {
		return fmt.Errorf("want Lease, ConfigMap and identity, got %q", c.Args)
	}
	name, cm, who := c.Args[0], c.Args[1], c.Args[2]
	mgr, err := manager.New(c.Config, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  logr.Discard(),
	})
	if err != nil {
		return err
	}
	b := &emitter{c: c}
	term := 0
	_, err = ctrllease.Add(mgr, ctrllease.Options{Namespace: ns, Name: name, Identity: who, Config: leaseConfig},
		func(m manager.Manager, _ *k8slease.Lease) error {
			term++
			c.Emit(fmt.Sprintf("setup %d", term))
			w := &writer{who: who, term: term, cm: cm, client: m.GetClient(), book: &book{}, emit: b.emit}
			return w.register(m)
		})
	if err != nil {
		return err
	}
	return mgr.Start(untilStop(c))
}

// untilStop returns a context that ends when the child's standard input
// ends or reads "stop".
func untilStop(c *kubetest.Child) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			line, err := c.ReadLine()
			if err != nil || line == "stop" {
				cancel()
				return
			}
		}
	}()
	return ctx
}

// emitter tells the parent of a writer's spans.
type emitter struct{ c *kubetest.Child }

func (e *emitter) emit(what string, term int, cause error, at time.Time) {
	switch {
	case what == "write":
		e.c.Emit(fmt.Sprintf("%s %d %d", what, term, at.UnixNano()))
	case cause != nil:
		e.c.Emit(fmt.Sprintf("%s %d %s", what, term, strings.ReplaceAll(cause.Error(), "\n", " ")))
	default:
		e.c.Emit(fmt.Sprintf("%s %d", what, term))
	}
}

// follow reads p's events into b as who's, until p exits or ctx ends.
func follow(ctx context.Context, p *kubetest.Process, b *book, who string) {
	spans := map[int]*span{}
	for {
		ev, err := p.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				// The child exited: so did its work (a stock Manager
				// that lost its election returns, and its process ends).
				b.mu.Lock()
				for _, s := range spans {
					if s.end.IsZero() {
						s.end = time.Now()
					}
				}
				b.mu.Unlock()
			}
			return
		}
		fields := strings.SplitN(ev.Text, " ", 3)
		if len(fields) < 2 {
			continue
		}
		term, _ := strconv.Atoi(fields[1])
		b.mu.Lock()
		switch fields[0] {
		case "setup":
			b.setups = append(b.setups, setupAt{who, term, ev.Time})
		case "begin":
			s := &span{who: who, term: term, start: ev.Time}
			spans[term] = s
			b.spans = append(b.spans, s)
		case "write":
			if s := spans[term]; s != nil && len(fields) == 3 {
				if ns, err := strconv.ParseInt(fields[2], 10, 64); err == nil {
					s.lastWrite = time.Unix(0, ns)
				}
			}
		case "end":
			if s := spans[term]; s != nil {
				s.end = ev.Time
				if len(fields) == 3 {
					s.cause = fmt.Errorf("%s", fields[2])
				}
			}
		}
		b.mu.Unlock()
	}
}
