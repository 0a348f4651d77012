package k8slease_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zukhruf/lease"
	"github.com/zukhruf/lease/issuers/k8slease"
)

// TestTryLockTakesASilentRecordOver: the record of a holder that stopped
// renewing is refused to a Locker that sees it for the first time, and taken
// over by one that has seen it unchanged for its lease duration, as a
// waiting Lock takes it.
func TestTryLockTakesASilentRecordOver(t *testing.T) {
	cs := clientset(t, shared.Config())
	name := leaseName(t)
	who, seconds := "crashed", int32(2)
	at := metav1.NewMicroTime(time.Now())
	dead, err := cs.CoordinationV1().Leases(ns).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &who, LeaseDurationSeconds: &seconds, AcquireTime: &at, RenewTime: &at,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	a := k8slease.NewLocker(cs, ns, "a", short)
	_, err = a.TryLock(ctx, name)
	if !errors.Is(err, lease.ErrHeld) || !strings.Contains(err.Error(), `holder "crashed"`) {
		t.Fatalf("TryLock() of a record first seen = %v, want lease.ErrHeld naming the holder", err)
	}
	time.Sleep(time.Duration(seconds)*time.Second + 100*time.Millisecond)

	b := k8slease.NewLocker(cs, ns, "b", short)
	if _, err := b.TryLock(ctx, name); !errors.Is(err, lease.ErrHeld) {
		t.Errorf("TryLock() of a Locker that sees the record for the first time = %v, want lease.ErrHeld", err)
	}
	l, err := a.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock() of a record seen unchanged for its lease duration = %v, want a lease", err)
	}
	defer l.Unlock(context.Background())
	if got := holderOf(t, cs, name); got != "a" {
		t.Errorf("the record names %q, want a", got)
	}
	if l.Token() <= mustToken(t, dead) {
		t.Errorf("Token() = %d, want above the dead holder's resourceVersion %s", l.Token(), dead.ResourceVersion)
	}
}

// TestLockerRefusesSubjects: a subject that is not a Lease name is refused
// at once, naming it, by Lock and TryLock alike.
func TestLockerRefusesSubjects(t *testing.T) {
	l := k8slease.NewLocker(clientset(t, shared.Config()), ns, "a", short)
	tests := []struct {
		name, subject, want string
	}{
		{"empty", "", "the empty subject"},
		{"upper case", "Orders", `"Orders" is not a valid Lease name`},
		{"too long", strings.Repeat("a", 254), "must be no more than 253"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
			defer cancel()
			for call, lock := range map[string]func(context.Context, string) (lease.Lease, error){
				"Lock": l.Lock, "TryLock": l.TryLock,
			} {
				ls, err := lock(ctx, tt.subject)
				if err == nil || ls != nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s(%.20q) = (%v, %v), want an error at once containing %q", call, tt.subject, ls, err, tt.want)
				}
			}
		})
	}
}

func mustToken(t testing.TB, l *coordinationv1.Lease) int64 {
	t.Helper()
	tok, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
