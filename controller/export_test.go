package controller

// Spread gives c's registry its set of shards now, as the first contention
// between registrations would, so that tests run on it.
func Spread(c *Controller) { c.lease().Spread() }
