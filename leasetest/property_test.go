package leasetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/leasetest"
	"github.com/zukhruf/lease/lost"
)

// memoryModel is what a Memory must show: each subject's holder, each
// lease's state, the last token.
type memoryModel struct {
	m        *leasetest.Memory
	leases   []lease.Lease
	subjects []string // leases[i]'s subject
	holder   map[string]int
	state    []string // "live", "lost", "ended"
	token    int64
}

func (p *memoryModel) actions() map[string]func(*rapid.T) {
	ctx := context.Background()
	subject := rapid.SampledFrom([]string{"a", "b", "c"})
	return map[string]func(*rapid.T){
		"TryLock": func(t *rapid.T) {
			s := subject.Draw(t, "subject")
			l, err := p.m.TryLock(ctx, s)
			if _, held := p.holder[s]; held {
				if !errors.Is(err, lease.ErrHeld) || l != nil {
					t.Fatalf("TryLock(%q) of a held subject = (%v, %v), want lease.ErrHeld", s, l, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("TryLock(%q) of a free subject = %v", s, err)
			}
			p.token++
			if l.Token() != p.token {
				t.Fatalf("Token() = %d, want %d", l.Token(), p.token)
			}
			p.holder[s] = len(p.leases)
			p.leases = append(p.leases, l)
			p.subjects = append(p.subjects, s)
			p.state = append(p.state, "live")
		},
		"Unlock": func(t *rapid.T) {
			if len(p.leases) == 0 {
				t.Skip("no lease")
			}
			i := rapid.IntRange(0, len(p.leases)-1).Draw(t, "lease")
			if err := p.leases[i].Unlock(ctx); err != nil {
				t.Fatalf("Unlock() = %v", err)
			}
			if p.state[i] == "live" {
				p.state[i] = "ended"
			}
			if h, ok := p.holder[p.subjects[i]]; ok && h == i {
				delete(p.holder, p.subjects[i])
			}
		},
		"Lose": func(t *rapid.T) {
			s := subject.Draw(t, "subject")
			h, held := p.holder[s]
			if got := p.m.Lose(s, errors.New("revoked")); got != held {
				t.Fatalf("Lose(%q) = %v, want %v", s, got, held)
			}
			if held {
				p.state[h] = "lost"
				delete(p.holder, s)
			}
		},
		"": func(t *rapid.T) {
			got := make([]string, len(p.leases))
			for i, l := range p.leases {
				var le *lost.Error
				switch err := l.Signal().Err(); {
				case err == nil:
					got[i] = "live" // or ended: a signal shows no difference
				case errors.As(err, &le) && le.Subject() == p.subjects[i]:
					got[i] = "lost"
				default:
					got[i] = fmt.Sprintf("Err() = %v", err)
				}
			}
			want := make([]string, len(p.state))
			for i, s := range p.state {
				want[i] = map[string]string{"live": "live", "ended": "live", "lost": "lost"}[s]
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("signals differ from the model (-want +got):\n%s", diff)
			}
		},
	}
}

// TestMemoryModel: first loss wins, Unlock never loses, a lost or released
// lease never frees a later holder's subject, tokens grow by one.
func TestMemoryModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := &memoryModel{m: new(leasetest.Memory), holder: map[string]int{}}
		t.Repeat(p.actions())
	})
}
