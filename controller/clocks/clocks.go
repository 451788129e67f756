// Package clocks holds the one default the controller's parts share for
// their injected clock. Each part takes a clock.Clock field so that a test
// can drive time with a fake; production wiring may leave it nil, and the
// part then runs on the real clock. Writing that default once keeps every
// part reading time the same way.
package clocks

import "k8s.io/utils/clock"

// Or is c, or the real clock when c is nil.
func Or(c clock.Clock) clock.Clock {
	if c == nil {
		return clock.RealClock{}
	}
	return c
}
