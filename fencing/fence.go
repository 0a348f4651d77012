package fencing

import "context"

// A Fence runs writes to resources under their fences: the highest token
// each resource accepted. [Memory] is one; [Handler] runs the requests it
// fences through one.
type Fence interface {
	// Do runs write if token is at least the highest token resource
	// accepted, and raises resource's fence to token if write returns nil,
	// in one step that no other Do on resource interleaves with. It returns
	// an error wrapping a *[StaleError] without running write when a higher
	// token was accepted, and write's error otherwise. A nil write raises
	// the fence alone.
	Do(ctx context.Context, resource string, token int64, write func(context.Context) error) error
}
