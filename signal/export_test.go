package signal

// Registrations returns how many registrations s keeps on its lease: AfterLoss
// callbacks, merged signals and contexts made from a parent other than
// Background.
func Registrations(s *Signal) int { return s.l.Registrations() }

// KeepsRegistry reports whether s's lease still holds a registry, its own
// context included.
func KeepsRegistry(s *Signal) bool { return s.l.KeepsRegistry() }

// ContextSlots returns the capacity of the slice that holds s's contexts made
// from parents other than Background, and how many entries its compactions
// have looked at.
func ContextSlots(s *Signal) (capacity, looks int) { return s.l.ContextSlots() }

// Spread gives s's registry its set of shards now, as the first contention
// between registrations would, so that tests run on it.
func Spread(s *Signal) { s.l.Spread() }

// Shards returns how many shards s's registry has: 0 without a registry, 1
// for its own shard alone, 1 more for each shard of its set.
func Shards(s *Signal) int { return s.l.Shards() }
