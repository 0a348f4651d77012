package signal

// Registrations returns how many registrations s keeps on its lease: AfterLoss
// callbacks, merged signals and contexts made from a parent other than
// Background.
func Registrations(s *Signal) int { return s.l.Registrations() }

// KeepsRegistry reports whether s's lease still holds a registry, its own
// context included.
func KeepsRegistry(s *Signal) bool { return s.l.KeepsRegistry() }
