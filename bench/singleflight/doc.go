// Package singleflight sets the lease's single-flight group beside
// golang.org/x/sync/singleflight: every benchmark runs both as
// sub-benchmarks (impl=lease, impl=xsync) of one benchmark, and
// TestAllocsBesideXSync holds the lease to at most one allocation more per
// flight and none more per caller that joins one.
//
// It is a package of the bench module so that x/sync never enters the
// library's go.mod; make bench-singleflight runs its benchmarks, and
// make test its tests.
package singleflight
