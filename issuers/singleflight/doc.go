// Package singleflight provides duplicate call suppression, as
// golang.org/x/sync/singleflight does, in which each call runs under a lease
// on its key that is lost when the call is forgotten.
//
// A [Group] runs one call of fn per key at a time; callers that come while it
// runs wait for it and share its result. [Group.Forget] lets the next call
// for the key start a new flight while the old one still runs. From then on
// two flights act for the same key, and with x/sync the old one is never
// told. Here each flight's fn gets a *[signal.Signal] on a lease granted
// when the flight starts: the lease ends when fn returns, and is lost, with
// [ErrForgotten] as its cause, when the flight is forgotten. A flight that
// checks [signal.Signal.Err] before its write (to a cache, a row, a file)
// does not overwrite the newer flight's, and the context fn gets is cut by
// the loss.
//
// The package needs only the standard library and the lease, so it lives in
// the lease's own module: importing it adds no dependency. Its tests compare
// it with x/sync only in the bench module, which keeps golang.org/x/sync out
// of the library's go.mod.
package singleflight
