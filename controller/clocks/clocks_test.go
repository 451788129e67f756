package clocks

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// A nil clock is the real one; a clock that is set, fake or real, is kept.
func TestOr(t *testing.T) {
	if _, ok := Or(nil).(clock.RealClock); !ok {
		t.Errorf("Or(nil) is %T, want clock.RealClock", Or(nil))
	}
	fake := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	if got := Or(fake); got != fake {
		t.Errorf("Or(fake) is %v, want the fake itself", got)
	}
	if got := Or(fake).Now(); !got.Equal(fake.Now()) {
		t.Errorf("Or(fake).Now() is %v, want the fake's %v", got, fake.Now())
	}
}
