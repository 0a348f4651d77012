package ctrltest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zukhruf/lease/health"
	"github.com/zukhruf/lease/internal/faultnet"
	"github.com/zukhruf/lease/internal/healthrec"
	"github.com/zukhruf/lease/issuers/ctrllease"
	"github.com/zukhruf/lease/issuers/k8slease"
)

// TestObserverSeesTerms: the observer of Options.Config is told of each
// term's lease: a's grant, its renewals and its loss when an operator takes
// the Lease, then, after a's next term, its release when a stops.
func TestObserverSeesTerms(t *testing.T) {
	b := &book{}
	name, cm := uniqueName(t), uniqueName(t)
	makeConfigMap(t, cm)
	rec := &healthrec.Recorder{}
	a := startReplica(t, b, "a", name, cm, replicaOptions{opts: func(o *ctrllease.Options) { o.Config.Observer = rec }})
	waitLeading(t, b, a, 1)
	rec.WaitFor(t, health.Renewed, 1)
	takeOver(t, name, "operator")
	all := rec.WaitFor(t, health.Lost, 1)
	if loss := all[len(all)-1]; !errors.Is(loss.Err, k8slease.ErrTakenOver) || loss.Issuer != "k8slease" {
		t.Errorf("lost = %v of %s, want ErrTakenOver of k8slease", loss.Err, loss.Issuer)
	}
	waitLeading(t, b, a, 2) // the operator's record expires after its 2 s
	a.stop()
	<-a.done
	all = rec.WaitFor(t, health.Released, 1)
	ks := healthrec.Kinds(all)
	if ks[0] != health.Granted || ks[len(ks)-1] != health.Released {
		t.Fatalf("events = %v, want granted first and released last", ks)
	}
	if n := len(slices.DeleteFunc(slices.Clone(ks), func(k health.Kind) bool { return k != health.Granted })); n != 2 {
		t.Errorf("events = %v: %d grants, want 2 terms", ks, n)
	}
}

// of returns the events r was told of the lease whose token is token.
func of(r *healthrec.Recorder, token int64) []healthrec.Stamped {
	return slices.DeleteFunc(r.Stamped(), func(e healthrec.Stamped) bool { return e.Token != token })
}

// count returns how many events of es are of kind.
func count(es []healthrec.Stamped, kind health.Kind) int {
	return healthrec.Count(healthrec.Unstamp(es), kind)
}

// slowedTerm is a replica whose lease's link to the apiserver (not its
// Manager's) goes through a proxy of its own.
type slowedTerm struct {
	r        *replica
	p        *faultnet.Proxy
	rec      *healthrec.Recorder
	lease    *k8slease.Lease // the first term's
	slowedAt time.Time
	deadline time.Time // the deadline the first term's lease was lost at
}

// TestTermAtRiskBeforeLoss: the first term of a replica whose lease was
// renewed twice, then whose lease's link to the apiserver was slowed to a
// round trip of 80% of the deadline span, is lost at the deadline; the
// observer of Options.Config is told AtRisk for that term's lease after the
// slowing and before the deadline, nothing but Lost after the deadline, and
// that term's events end with Lost.
// The trials run side by side, each a replica of its own.
func TestTermAtRiskBeforeLoss(t *testing.T) {
	const trials = 5
	b := &book{}
	terms := make([]*slowedTerm, trials)
	for i := range terms {
		p, err := faultnet.Listen(shared.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		st := &slowedTerm{p: p, rec: &healthrec.Recorder{}}
		name, cm := uniqueName(t), uniqueName(t)
		makeConfigMap(t, cm)
		st.r = startReplica(t, b, fmt.Sprint("a", i), name, cm, replicaOptions{opts: func(o *ctrllease.Options) {
			o.Config.Observer = st.rec
			o.Client = clientset(t, shared.ConfigVia(p.Addr()))
		}})
		terms[i] = st
	}
	for _, st := range terms {
		waitLeading(t, b, st.r, 1)
		st.lease = st.r.lease()
		waitFor(t, time.Minute, st.r.who+"'s 2 renewals", func() bool { return count(of(st.rec, st.lease.Token()), health.Renewed) >= 2 })
		h := st.lease.Health()
		st.slowedAt = time.Now()
		st.p.Delay(time.Duration(0.8 * float64(h.Deadline.Sub(h.Renewed)) / 2))
	}
	for _, st := range terms {
		select {
		case <-st.lease.Signal().Done():
		case <-time.After(time.Minute):
			t.Fatalf("%s's first term was not lost through the slowed link within a minute", st.r.who)
		}
		st.deadline = st.lease.Health().Deadline
		waitFor(t, 10*time.Second, st.r.who+"'s Lost event", func() bool { return count(of(st.rec, st.lease.Token()), health.Lost) > 0 })
	}
	for _, st := range terms {
		st.r.stop()
		<-st.r.done
		st.p.Heal()
	}
	warned, lead := 0, []time.Duration{}
	for _, st := range terms {
		es := of(st.rec, st.lease.Token())
		if last := es[len(es)-1]; last.Kind != health.Lost || !errors.Is(last.Err, k8slease.ErrRenewalUnconfirmed) {
			t.Errorf("%s's first term: events %v, the last with %v; want Lost last, with ErrRenewalUnconfirmed", st.r.who, healthrec.Kinds(healthrec.Unstamp(es)), last.Err)
		}
		for _, e := range es[:len(es)-1] {
			if !e.At.Before(st.deadline) {
				t.Errorf("%s's first term: %v %v after the deadline, before the Lost event", st.r.who, e.Kind, e.At.Sub(st.deadline))
			}
		}
		var warning *healthrec.Stamped
		for i, e := range es {
			if e.Kind == health.AtRisk && !e.At.Before(st.slowedAt) && e.At.Before(st.deadline) {
				warning = &es[i]
				break
			}
		}
		if warning == nil {
			t.Errorf("%s's first term: no AtRisk between the slowing and the deadline: %v", st.r.who, healthrec.Kinds(healthrec.Unstamp(es)))
			continue
		}
		warned++
		lead = append(lead, st.deadline.Sub(warning.At))
	}
	if sum := (healthrec.Summary{Trials: trials, Margins: lead}); sum.Warned() > 0 {
		t.Logf("AtRisk before the loss in %d of %d terms, %v before the deadline (median; least %v)", warned, trials, sum.Median(), sum.Least())
	}
}
