package leasetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/leasetest"
	"github.com/zukhruf/lease/signal"
)

// The negative controls: Lockers built wrong, each of which the suite must
// fail, in the checks named. Each runs the suite in a child process (the
// test binary itself), since a failed suite fails the test that runs it.
var controls = map[string]struct {
	harness func() leasetest.Harness
	fails   []string // subtests of Run that must fail
}{
	// Unlock loses the signal instead of ending it.
	"LosesOnUnlock": {
		harness: func() leasetest.Harness {
			m, h := memoryHarness()
			h.NewLocker = func(*testing.T) lease.Locker { return losesOnUnlock{m} }
			return h
		},
		fails: []string{"LockUnlock", "UnlockHandsOver", "UnlockTwice"},
	},
	// Each client keeps its own state, so two clients hold one subject.
	"GrantsTwice": {
		harness: func() leasetest.Harness {
			_, h := memoryHarness()
			h.NewLocker = func(*testing.T) lease.Locker { return new(leasetest.Memory) }
			return h
		},
		fails: []string{"MutualExclusion", "UnlockHandsOver", "TryLock"},
	},
	// Tokens count down.
	"TokenGoesBackwards": {
		harness: func() leasetest.Harness {
			m, h := memoryHarness()
			h.NewLocker = func(*testing.T) lease.Locker { return backwardsTokens{m} }
			return h
		},
		fails: []string{"MutualExclusion", "LockAfterUnlock", "TryLock"},
	},
}

const controlEnv = "LEASETEST_CONTROL"

func TestNegativeControls(t *testing.T) {
	if os.Getenv(controlEnv) != "" {
		t.Skip("in a control's child process")
	}
	for name, c := range controls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestControlChild$", "-test.v")
			cmd.Env = append(os.Environ(), controlEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a Locker built wrong (%s):\n%s", name, out)
			}
			for _, check := range c.fails {
				if !strings.Contains(string(out), "--- FAIL: TestControlChild/"+check+" ") {
					t.Errorf("the suite did not fail %s on a Locker built wrong (%s):\n%s", check, name, out)
				}
			}
		})
	}
}

// TestControlChild runs the suite on the control that controlEnv names; it
// passes with nothing to run otherwise.
func TestControlChild(t *testing.T) {
	name := os.Getenv(controlEnv)
	if name == "" {
		t.Skip("run by TestNegativeControls")
	}
	leasetest.Run(t, controls[name].harness())
}

type losesOnUnlock struct{ m *leasetest.Memory }

func (l losesOnUnlock) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	ls, err := l.m.Lock(ctx, subject)
	if err != nil {
		return nil, err
	}
	return losingLease{ls, l.m, subject}, nil
}

func (l losesOnUnlock) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	ls, err := l.m.TryLock(ctx, subject)
	if err != nil {
		return nil, err
	}
	return losingLease{ls, l.m, subject}, nil
}

type losingLease struct {
	lease.Lease
	m       *leasetest.Memory
	subject string
}

func (l losingLease) Unlock(ctx context.Context) error {
	if l.Signal().Err() == nil {
		l.m.Lose(l.subject, errors.New("released"))
	}
	return l.Lease.Unlock(ctx)
}

type backwardsTokens struct{ m *leasetest.Memory }

func (l backwardsTokens) Lock(ctx context.Context, subject string) (lease.Lease, error) {
	ls, err := l.m.Lock(ctx, subject)
	if err != nil {
		return nil, err
	}
	return backwardsLease{ls}, nil
}

func (l backwardsTokens) TryLock(ctx context.Context, subject string) (lease.Lease, error) {
	ls, err := l.m.TryLock(ctx, subject)
	if err != nil {
		return nil, err
	}
	return backwardsLease{ls}, nil
}

type backwardsLease struct{ lease.Lease }

func (l backwardsLease) Token() int64           { return 1000 - l.Lease.Token() }
func (l backwardsLease) Signal() *signal.Signal { return l.Lease.Signal() }
