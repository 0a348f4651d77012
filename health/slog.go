package health

import (
	"context"
	"log/slog"
)

// Logger returns an Observer that writes each event to l: grants and
// releases at Info, renewals at Debug, failed renewals and AtRisk at Warn,
// losses at Error, each with the message "lease " and the kind ("lease
// at_risk") and the event's fields in a group "lease". A nil l is
// slog.Default() at each event.
func Logger(l *slog.Logger) Observer {
	return logger{l}
}

type logger struct{ l *slog.Logger }

func (lg logger) Observe(e Event) {
	l := lg.l
	if l == nil {
		l = slog.Default()
	}
	level := slog.LevelInfo
	switch e.Kind {
	case Renewed:
		level = slog.LevelDebug
	case RenewalFailed, AtRisk:
		level = slog.LevelWarn
	case Lost:
		level = slog.LevelError
	}
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	l.LogAttrs(ctx, level, "lease "+e.Kind.String(), slog.Any("lease", e))
}
