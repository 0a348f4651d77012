// Package bench compares the lease with its peers in one run: every
// benchmark runs this library and its peers (context.WithCancelCause with
// context.AfterFunc, a context.WithCancel child of a lease that is a context,
// a hand-rolled signal) as sub-benchmarks of one benchmark (impl=lease,
// impl=context, impl=context.child, impl=handrolled), so that benchstat can
// set them side by side.
//
// It is a module of its own so that benchstat and the plotting library never
// enter the library's go.mod. Run it with make bench from the repository
// root; docs/benchmarks.md explains each benchmark and holds the figures.
package bench
