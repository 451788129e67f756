package cloudprovider_test

// The provider against what public recordings show of the real Elastic Metal
// API (issue #14): servers ready without IPs, private networks attached while
// the option enables, bare 429 storms, 503 refusals, lasting 5xx, and the
// unrecorded answers in every plausible shape. Create returns once the
// server is ordered; what the install does with these answers is read from
// the install controller's outcome (the node, the events, the servers).

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// releases counts DeleteServer calls: a release of a bought server.
func releases(t *testing.T, e *env) int {
	t.Helper()
	n, err := e.w.Sim.CountCalls("DELETE", `^/baremetal/v1/zones/[^/]+/servers/[^/]+$`)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitReadyNode waits for the node of providerID to register and be Ready.
func (e *env) waitReadyNode(providerID string) *corev1.Node {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		node := e.waitNode(providerID)
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return node
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node %s never Ready: %+v", node.Name, node.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Recorded: a server can reach "ready" with ips: []. The install waits for
// its IPv4 instead of releasing a server just bought.
func TestReadyWithoutIPsIsWaitedForNotReleased(t *testing.T) {
	e := startEnv(t, func(o *scwsim.Options) {
		o.ReadyIPs = scwsim.ReadyIPsLate
		o.Delays.IPsAfterReady = 2 * time.Second // 40 polls of the test profile
	})
	claim := e.nodeClaim()
	got := e.launch(claim)
	e.waitReadyNode(got.Status.ProviderID)
	if n := releases(t, e); n != 0 {
		t.Fatalf("%d servers released", n)
	}
	if n := e.creates(claim.Name); n != 1 {
		t.Fatalf("%d orders", n)
	}
	if !e.events.said(claim.Name, "InstallOrdered", "lists no IPv4") {
		t.Error("no InstallOrdered event said the install waits for the server's IPv4")
	}
}

// Recorded: attaching a private network is accepted while the Private
// Network option is still enabling; a stricter API answering 412 until it is
// enabled is retried until it is.
func TestAttachWhileOptionEnabling(t *testing.T) {
	const pn = "5a1b5a5e-1111-4111-8111-aaaaaaaaaaaa"
	for _, mode := range []scwsim.AttachMode{scwsim.AttachWhileEnabling, scwsim.AttachOnceEnabled} {
		t.Run(string(mode), func(t *testing.T) {
			e := startEnv(t, func(o *scwsim.Options) {
				o.PrivateNetworkAttach = mode
				o.Delays.OptionEnable = 2 * time.Second // several attach attempts while enabling
			})
			e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.PrivateNetworkIDs = []string{pn} })
			claim := e.nodeClaim()
			got := e.launch(claim)
			// Delivery attaches the networks before the server leaves "ordered".
			e.waitPhase(claim.Name, install.PhaseRescue)
			_, id, _ := scaleway.ParseProviderID(got.Status.ProviderID)
			if vlans := e.w.Sim.PrivateNetworks(id); vlans[pn] == 0 {
				t.Fatalf("server %s not attached to %s: %v", id, pn, vlans)
			}
			e.waitReadyNode(got.Status.ProviderID)
			if n := releases(t, e); n != 0 {
				t.Fatalf("%d servers released", n)
			}
		})
	}
}

// Recorded: Scaleway's gateway throttles with bare 429s (no body, no
// Retry-After). A storm longer than the attempts of one call is ridden out.
func TestBare429StormIsRiddenOut(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	// Every request of the next 8 is throttled: more than the 5 attempts a
	// call makes on a 5xx.
	storm := e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultRateLimit, Times: 8})
	got, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		t.Fatalf("Create through a 429 storm: %v", err)
	}
	e.launched(claim.Name, got)
	if hits := e.w.Sim.FaultHits(storm); hits != 8 {
		t.Fatalf("the storm throttled %d requests, want 8", hits)
	}
	e.waitReadyNode(got.Status.ProviderID)
	if n := e.creates(claim.Name); n != 1 {
		t.Fatalf("%d orders", n)
	}
}

// Recorded: a request the API refuses can come back as a 503 with only a
// message. It surfaces at once (one order attempt), is not retried as an
// outage, and the offering is set aside so that the next NodeClaim's Create
// tries another (Karpenter deletes a claim whose Create found no capacity
// and makes a new one). The refused claim's own order stays in flight: a
// 5xx proves nothing about what the API did.
func TestRefusal503SurfacesWithinOneOrder(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	first := cheapestAvailable(e.instanceTypes())
	refusal := e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "POST", Path: `/servers$`, Status: 503,
		Body: `{"message":"cloud-init is not supported on this offer"}`, ContentType: "application/json", Times: 1})
	_, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err == nil || !strings.Contains(err.Error(), "cloud-init is not supported on this offer") {
		t.Fatalf("Create = %v, want the API's refusal", err)
	}
	if hits := e.w.Sim.FaultHits(refusal); hits != 1 {
		t.Fatalf("refused order sent %d times, want 1", hits)
	}
	if _, marked := e.p.Catalog.Unavailable("fr-par-2", first, catalog.BillingHourly); !marked {
		t.Errorf("%s not set aside after a refused order", first)
	}
	next := e.nodeClaim()
	got, err := e.p.CloudProvider.Create(e.ctx, next)
	if err != nil {
		t.Fatalf("the next claim's Create: %v", err)
	}
	if it := got.Labels[corev1.LabelInstanceTypeStable]; it == first {
		t.Fatalf("ordered %s again although it was refused", it)
	}
	if n := e.creates(next.Name); n != 1 {
		t.Fatalf("%d orders", n)
	}
}

// 5xx answers are retried a bounded number of times, then the install's
// wait stops with a clear error (the server is kept, not released), and the
// install resumes once the API answers again.
func TestLasting5xxEndsInAClearErrorThenResumes(t *testing.T) {
	e := startEnv(t, func(o *scwsim.Options) { o.Delays.Delivery = 2 * time.Second })
	claim := e.nodeClaim()
	// The order is in: from now on every server listing fails, and the
	// install cannot see its server deliver.
	got := e.launch(claim)
	id := e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 500})
	// The failed listings when the install gives up its first wait: it says
	// so (an event) before it waits to try again.
	firstGaveUp := make(chan int, 1)
	e.events.onPublish(func(ev events.Event) {
		if o, ok := ev.InvolvedObject.(client.Object); ok && o.GetName() == claim.Name &&
			ev.Reason == "InstallOrdered" && strings.Contains(ev.Message, "retrying after") {
			select {
			case firstGaveUp <- e.w.Sim.FaultHits(id):
			default:
			}
		}
	})
	var hits int
	select {
	case hits = <-firstGaveUp:
	case <-time.After(2 * time.Minute):
		t.Fatal("the install never gave up waiting while every listing failed")
	}
	// Each poll makes at most MaxAttempts (5) requests, and the wait gives
	// up after 5 failed polls in a row. The inventory's zone sweep (once a
	// minute here, the same 5 attempts) lists too, and on a loaded machine
	// one sweep can fall inside the wait.
	if hits == 0 || hits > 5*5+5 {
		t.Fatalf("%d failed listings before giving up, want 1..30", hits)
	}
	// The server was delivered before the listings failed: a retry that
	// reads it (GetServer still answers) goes on to phase rescue, whose
	// waits fail the same way; its retries count too.
	retries := func() (msgs []string) {
		for _, reason := range []string{"InstallOrdered", "InstallRescue"} {
			for _, ev := range e.events.find(claim.Name, reason) {
				if strings.Contains(ev.Message, "retrying after") {
					msgs = append(msgs, ev.Message)
				}
			}
		}
		return msgs
	}
	if msg := retries()[0]; !strings.Contains(msg, "500") || !strings.Contains(msg, "polls failed") {
		t.Fatalf("the install does not say the API kept failing: %q", msg)
	}
	// A second failed wait: still nothing released, and Karpenter's retried
	// Create still gets the same server without an order.
	e.eventually("a second failed wait", func() bool { return len(retries()) >= 2 })
	if n := releases(t, e); n != 0 {
		t.Fatalf("%d servers released because the API failed", n)
	}
	if e.claimGone(claim.Name) {
		t.Fatal("the nodeclaim was deleted because the API failed")
	}
	e.w.Sim.ClearFaults()
	e.createAgain(claim, got, "after the outage")
	e.waitReadyNode(got.Status.ProviderID)
	if n := e.creates(claim.Name); n != 1 {
		t.Fatalf("%d orders", n)
	}
	if n := releases(t, e); n != 0 {
		t.Fatalf("%d servers released", n)
	}
}

// What no recording shows (out of stock, quota, precondition and transient
// answers, how fast a reboot shows) is a guess; under every plausible shape
// the provider degrades to a clear error or a fallback, orders at most once
// per Create, leaks nothing, and still installs.
func TestUnrecordedShapesDegradeClearly(t *testing.T) {
	for _, shape := range []scwsim.UnrecordedShape{scwsim.UnrecordedTyped, scwsim.UnrecordedMessage, scwsim.UnrecordedEmpty, scwsim.UnrecordedText} {
		t.Run(string(shape), func(t *testing.T) {
			e := startEnv(t, func(o *scwsim.Options) { o.Unrecorded = shape })
			first := cheapestAvailable(e.instanceTypes())
			if err := e.w.Sim.SetStock("", first, 0); err != nil {
				t.Fatal(err)
			}
			claim := e.nodeClaim()
			got, err := e.p.CloudProvider.Create(e.ctx, claim)
			switch {
			case err == nil:
				if it := got.Labels[corev1.LabelInstanceTypeStable]; it == first {
					t.Fatalf("ordered %s, which is out of stock", it)
				}
				e.launched(claim.Name, got)
				e.waitReadyNode(got.Status.ProviderID)
			case cloudprovider.IsInsufficientCapacityError(err) || strings.Contains(err.Error(), "412"):
				// A bodiless refusal cannot be told from another: a clear
				// error, the offering set aside, nothing ordered.
				if _, marked := e.p.Catalog.Unavailable("fr-par-2", first, catalog.BillingHourly); !marked {
					t.Fatalf("%s not set aside after %v", first, err)
				}
				if got, err = e.p.CloudProvider.Create(e.ctx, claim); err != nil {
					t.Fatalf("second Create: %v", err)
				}
				e.launched(claim.Name, got)
				e.waitReadyNode(got.Status.ProviderID)
			default:
				t.Fatalf("Create = %v", err)
			}
			if n := e.creates(claim.Name); n != 1 {
				t.Fatalf("%d orders", n)
			}
			if n := releases(t, e); n != 0 {
				t.Fatalf("%d servers released", n)
			}
		})
	}
}
