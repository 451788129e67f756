package install

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
)

// Path 14 of issue 31, host keys: the process before a restart pinned the
// host key of a server's rescue boot and died; the restarted one sees the
// server through the poller's listing, which lags and shows no pin. It
// must load the pin from a read by ID (else it trusts whatever answers on
// first use) and must never write another key over the stored pin (else
// the stored pin is gone for good): the host is refused instead
// (RescueHostKeyChanged). A pin it cannot read fails the attempt closed.
func TestRestartNeverTrustsARescueHostOnFirstUseFromALaggingListing(t *testing.T) {
	const (
		zone    = scw.Zone("fr-par-2")
		lag     = 3 * time.Second
		address = "127.0.0.1"
	)
	pinOf := func(s string) rescue.HostKeyPin {
		sum := sha256.Sum256([]byte(s))
		return rescue.HostKeyPin("SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:]))
	}
	oldPin, newPin := pinOf("the boot the previous process pinned"), pinOf("someone else on the address")
	ctx := context.Background()
	sim, api1, url := simapi.StartURL(t, zone, func(o *scwsim.Options) { o.StaleLag = lag })
	offerID, ok := sim.OfferID(string(zone), "EM-A116X-SSD", "hourly")
	if !ok {
		t.Fatal("no offer")
	}
	claimTag := scaleway.Tag(scaleway.TagNodeClaim, "n1")
	srv, _, err := api1.CreateServer(ctx, scaleway.CreateServerRequest{
		Zone: zone, OfferID: offerID, Name: "n", Tags: []string{claimTag, rescueBootTag}, IdempotencyTag: claimTag})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(lag + 500*time.Millisecond)
	// The previous process pins the rescue boot's key, then dies.
	if _, err := api1.SetTag(ctx, zone, srv.ID, TagRescueHostKey, string(oldPin)); err != nil {
		t.Fatal(err)
	}

	api2 := simapi.NewClient(t, sim, url, zone)
	listed, err := api2.ListServers(ctx, zone, []string{claimTag})
	if err != nil || len(listed) != 1 {
		t.Fatalf("listing: %v %d", err, len(listed))
	}
	if v, _ := scaleway.TagValue(listed[0].Tags, TagRescueHostKey); v != "" {
		t.Fatalf("the listing should lag (no pin yet), shows %q", v)
	}
	i := &Installer{API: api2, Dialer: &rescue.Dialer{}, Log: testlog.New(t)}

	// The pin comes from a read by ID, not from the listed server.
	if err := i.loadHostKeyPin(ctx, listed[0], address); err != nil {
		t.Fatal(err)
	}
	if got := i.Dialer.Pinned(address); got != oldPin {
		t.Errorf("pin loaded after the restart: %q, want the stored %q (trust on first use again)", got, oldPin)
	}

	// A session that presented another key never replaces the stored pin.
	_, err = i.recordHostKey(&scope{run: ctx, phase: ctx, log: i.Log}, listed[0], newPin)
	var changed *rescue.HostKeyChangedError
	if !errors.As(err, &changed) {
		t.Errorf("recording another key over the stored pin: %v, want a HostKeyChangedError", err)
	}
	if st, _ := sim.Server(srv.ID); scwsim.TagValue(st.Tags, TagRescueHostKey) != string(oldPin) {
		t.Errorf("stored pin is now %q, want %q", scwsim.TagValue(st.Tags, TagRescueHostKey), oldPin)
	}

	// A pin that cannot be read fails closed: no pin loaded, an error.
	api3 := simapi.NewClient(t, sim, url, zone, func(c *scaleway.Config) { c.Retry.MaxAttempts = 1 })
	i3 := &Installer{API: api3, Dialer: &rescue.Dialer{}, Log: testlog.New(t)}
	fault := sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: http.MethodGet, Path: `/servers/` + srv.ID + `$`, Status: http.StatusServiceUnavailable})
	defer sim.RemoveFault(fault)
	if err := i3.loadHostKeyPin(ctx, listed[0], address); err == nil {
		t.Errorf("an unreadable pin let the attempt go on (pinned %q)", i3.Dialer.Pinned(address))
	}
}
