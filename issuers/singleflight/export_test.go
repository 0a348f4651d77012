package singleflight

// Dups returns how many callers joined the flight for key that the Group
// holds, and false when it holds none, so that a test can wait until its
// callers have joined instead of sleeping.
func (g *Group[V]) Dups(key string) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.m[key]
	if !ok {
		return 0, false
	}
	return c.dups, true
}

// SetForgetHook sets a func that Forget calls after it let go of the
// Group's mutex and before it cancels the forgotten flight's contexts; nil
// removes it.
func SetForgetHook(f func()) { testHookForgetUnlocked = f }
