// Package scale holds the benchmarks that make bench-scale runs at every
// core count the machine has: the ops a server makes on one lease from every
// core at once, each beside the same op on a lease per goroutine (the limit)
// and beside package context's way. It has no code of its own.
package scale
