package singleflight

import "github.com/zukhruf/lease/health"

// A flight's lease has no deadline and no renewal: its Health is the zero
// health.Health, and its Observer sees a grant, then a loss or a release.
// The events go out after g.mu is given back, with nothing built when the
// Observer is nil.

const issuer = "singleflight"

func (g *Group[V]) granted(key string) {
	if g.Observer != nil {
		health.NotifyGranted(g.Observer, health.Event{Issuer: issuer, Subject: key})
	}
}

func (g *Group[V]) lost(key string, err error) {
	if g.Observer != nil {
		health.NotifyLost(g.Observer, health.Event{Issuer: issuer, Subject: key, Err: err, Via: health.Push})
	}
}

func (g *Group[V]) released(key string) {
	if g.Observer != nil {
		health.NotifyReleased(g.Observer, health.Event{Issuer: issuer, Subject: key})
	}
}
