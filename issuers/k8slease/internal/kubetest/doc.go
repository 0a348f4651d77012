// Package kubetest runs a real kube-apiserver, on an etcd server started in
// the test process, for the tests, the fault trials and the demo of package
// k8slease.
//
// [Start] gives a test a [Server] of its own, stopped at the end of the
// test; [Options.StartShared] gives a TestMain one that its tests share,
// since a start costs seconds. A Server's clients authenticate with a
// bearer token of the group system:masters and verify the apiserver's
// certificate; [Server.ConfigVia] points them at a proxy, such as a
// [github.com/zukhruf/lease/internal/faultnet.Proxy], in front of it. A
// Server stops and starts its apiserver and its etcd on the same ports and
// data, so that clients see an outage and a recovery.
//
// The kube-apiserver binary is built from the Go module proxy the first time
// it is needed and kept in the user's cache folder (see package kubebin and
// make k8s-apiserver). [StartChild] runs a role of the test binary in a
// child process, for a holder a test pauses with SIGSTOP or a candidate in
// another process.
//
// A Server runs etcd's goroutines in the test process, and client-go keeps
// idle connections to the apiserver until the apiserver ends them: while a
// Server runs, goleak needs the options of [IgnoreGoroutines]; once every
// Server is stopped, it needs none. This package's TestMain checks both,
// before and after it stops the shared Server. The first check is the one
// that finds a watch left open, whose goroutine the stop would end.
package kubetest
