package preimage

import (
	"context"
	"errors"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// A failed spare's backoff lasts while it is a spare; once the listing
// shows it taken or gone, the backoff is dropped (the map held every server
// that ever failed), and a spare still backing off is not started.
func TestBackoffsOfServersNoLongerSparesAreDropped(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	spare := func(id string) *baremetal.Server {
		return &baremetal.Server{ID: id, Status: baremetal.ServerStatusReady, Tags: install.SetPhaseIn(nil, install.PhaseSpare, now)}
	}
	taken := &baremetal.Server{ID: "taken", Status: baremetal.ServerStatusReady, Tags: install.SetPhaseIn(nil, install.PhaseJoined, now)}
	listed := []*baremetal.Server{spare("waiting"), taken}
	c := &Controller{
		Clock:    clocktesting.NewFakeClock(now),
		Interval: time.Minute,
		Servers:  func(context.Context) ([]*baremetal.Server, error) { return listed, nil },
	}
	for _, id := range []string{"waiting", "taken", "gone"} {
		_ = c.failedWith(&baremetal.Server{ID: id}, "imaging", errors.New("boom"))
	}
	if _, err := c.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(c.failed) != 1 || c.failed["waiting"].count != 1 {
		t.Fatalf("backoffs after the sweep: %v, want only the listed spare's", c.failed)
	}
	if len(c.running) != 0 {
		t.Fatalf("started %v: a spare backing off must wait", c.running)
	}
}
