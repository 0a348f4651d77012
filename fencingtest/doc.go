// Package fencingtest is the conformance suite that every fence of
// [github.com/zukhruf/lease/fencing] and its nested modules runs on its
// real store: [Run] checks that the store refuses a holder paused past its
// lease, a request held in the network while the next holder wrote, and
// the stale writes among 32 racing writers, and that an equal token
// passes; [RunNegativeControls] runs the suite on two fences built wrong
// over the same store and wants each to fail it.
package fencingtest
