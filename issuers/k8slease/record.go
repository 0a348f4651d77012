package k8slease

import (
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// holder returns the identity the Lease's record names, "" for none.
func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// durationOf returns the lease duration the record states; a record that
// states none is free to take, as client-go reads it.
func durationOf(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

func transitionsOf(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// setRecord writes into l the record of client-go's LeaderElectionRecord
// form: holder, lease duration in whole seconds, acquire and renew times
// (in microseconds, as the Lease stores them) and the count of transitions.
func setRecord(l *coordinationv1.Lease, holder string, seconds int32, acquired, renewed time.Time, transitions int32) {
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &seconds
	a, r := metav1.NewMicroTime(acquired), metav1.NewMicroTime(renewed)
	l.Spec.AcquireTime = &a
	l.Spec.RenewTime = &r
	l.Spec.LeaseTransitions = &transitions
}

// renewedAt reports whether l's renewTime is t, to the microsecond the Lease
// keeps.
func renewedAt(l *coordinationv1.Lease, t time.Time) bool {
	return l.Spec.RenewTime != nil && l.Spec.RenewTime.UnixMicro() == t.UnixMicro()
}

// acquiredAt reports whether l's acquireTime is t, to the microsecond.
func acquiredAt(l *coordinationv1.Lease, t time.Time) bool {
	return l.Spec.AcquireTime != nil && l.Spec.AcquireTime.UnixMicro() == t.UnixMicro()
}

// token parses a Lease's resourceVersion as the fencing token.
func token(l *coordinationv1.Lease) (int64, error) {
	t, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil || t <= 0 {
		return 0, fmt.Errorf("resourceVersion %q is not a positive integer", l.ResourceVersion)
	}
	return t, nil
}

// describe names a Lease's record for a cause.
func describe(l *coordinationv1.Lease) string {
	renew := "never"
	if l.Spec.RenewTime != nil {
		renew = clock(l.Spec.RenewTime.Time)
	}
	return fmt.Sprintf("holder %q, lease duration %v, renewed %s, resourceVersion %s", holder(l), durationOf(l), renew, l.ResourceVersion)
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
