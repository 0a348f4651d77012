package signal

// Registrations returns how many registrations s keeps on its lease: AfterLoss
// callbacks, merged signals and contexts made from a parent other than
// Background.
func Registrations(s *Signal) int { return s.l.Registrations() }
