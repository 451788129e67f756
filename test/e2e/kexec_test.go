package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// reboots lists the boot types of the reboots the ledger holds for id, in
// order: what the controller asked of Scaleway.
func reboots(sim *scwsim.Sim, id string) []string {
	var out []string
	for _, e := range sim.Ledger() {
		if e.Kind == scwsim.LedgerReboot && e.Server == id {
			out = append(out, e.BootType)
		}
	}
	return out
}

// kexecJumps counts the machine's kexec jumps (the simulated rescue's
// record of em-imager kexec jumping).
func kexecJumps(e *harness.Env, id string) int {
	n := 0
	for _, ev := range e.W.Machines.Events() {
		if ev.ServerID == id && ev.What == "kexec" {
			n++
		}
	}
	return n
}

// onlyServer is the one server of the world, once the node is bound.
func onlyServer(t *testing.T, e *harness.Env) scwsim.ServerState {
	t.Helper()
	servers := e.W.Sim.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers, want 1; %s", len(servers), e.Summary())
	}
	return servers[0]
}

// The default boot (Auto) on a rescue kernel that allows kexec: em-imager
// jumps into Talos, the node joins without Scaleway's reboot (the ledger
// holds the reboot into rescue only), and the server records the jump,
// with the API's boot type still rescue, in no more calls about the server
// than callBudgetPerServer.
func TestKexecBootSkipsTheAPIReboot(t *testing.T) {
	e := harness.Start(t, harness.Setup{})
	e.Run("kexec", 1, "1", "1Gi", false)
	e.WaitBound("kexec", 1, harness.WaitLong)
	s := onlyServer(t, e)
	if got := reboots(e.W.Sim, s.ID); strings.Join(got, ",") != "rescue" {
		t.Errorf("reboots %v, want only the one into rescue", got)
	}
	if n := kexecJumps(e, s.ID); n != 1 {
		t.Errorf("%d kexec jumps, want 1", n)
	}
	if world.TagValue(s.Tags, install.TagKexec) == "" || s.BootType != string(baremetal.ServerBootTypeRescue) {
		t.Errorf("server after a kexec boot: boot type %s, tags %v", s.BootType, s.Tags)
	}
	if v := world.TagValue(s.Tags, install.TagRescueBoot); v != "" {
		t.Errorf("the rescue boot mark outlived the jump: %q", v)
	}
	e.AssertNoDuplicateOrders()
	e.AssertNoMaintenanceAPI()
	// The jump's record rides on phase booting's write: a kexec boot costs
	// no more calls than a reboot through the API.
	e.AssertCallsPerServer(callBudgetPerServer)
}

// A rescue kernel that refuses kexec: the same booting phase reboots
// through the API (one normal reboot, no failed install, the phase entered
// once), and no kexec record is left on the server.
func TestKexecRefusedFallsBackToTheAPIRebootInTheSameAttempt(t *testing.T) {
	e := harness.Start(t, harness.Setup{World: world.Options{Sim: func(o *scwsim.Options) {
		o.Kexec = map[string]string{"*": scwsim.KexecDisabled}
	}}})
	e.Run("refused", 1, "1", "1Gi", false)
	e.WaitBound("refused", 1, harness.WaitLong)
	s := onlyServer(t, e)
	if got := reboots(e.W.Sim, s.ID); strings.Join(got, ",") != "rescue,normal" {
		t.Errorf("reboots %v, want rescue then normal", got)
	}
	if n := kexecJumps(e, s.ID); n != 0 {
		t.Errorf("%d kexec jumps on a refusing rescue", n)
	}
	if v := world.TagValue(s.Tags, install.TagKexec); v != "" {
		t.Errorf("kexec record left after the fallback: %q", v)
	}
	booting := 0
	for _, tl := range e.Track.Timelines() {
		for _, p := range tl.Phases {
			if p.Value == string(install.PhaseBooting) {
				booting++
			}
		}
	}
	if booting != 1 {
		t.Errorf("the booting phase began %d times, want once", booting)
	}
	e.AssertNoDuplicateOrders()
	e.AssertCallsPerServer(maxCallsPerServer)
}

// spec.boot Reboot never runs kexec, on a rescue kernel that allows it.
func TestKexecNeverInRebootMode(t *testing.T) {
	e := harness.Start(t, harness.Setup{NodeClass: func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.Boot = v1alpha1.BootReboot
	}})
	e.Run("reboot", 1, "1", "1Gi", false)
	e.WaitBound("reboot", 1, harness.WaitLong)
	s := onlyServer(t, e)
	if got := reboots(e.W.Sim, s.ID); strings.Join(got, ",") != "rescue,normal" {
		t.Errorf("reboots %v, want rescue then normal", got)
	}
	if n := kexecJumps(e, s.ID); n != 0 {
		t.Errorf("%d kexec jumps in Reboot mode", n)
	}
	if v := world.TagValue(s.Tags, install.TagKexec); v != "" {
		t.Errorf("kexec record in Reboot mode: %q", v)
	}
	e.AssertNoDuplicateOrders()
}

// The controller is killed right after em-imager jumped, while Talos boots
// (a long KexecBoot): the new process finds the jump recorded on the
// server, jumps nothing again and reboots nothing, and the node joins on
// the one server.
func TestKexecRestartDuringTheJumpResumes(t *testing.T) {
	e := harness.Start(t, harness.Setup{World: world.Options{Sim: func(o *scwsim.Options) {
		o.Delays.KexecBoot = 4 * time.Second
	}}})
	e.Run("jump", 1, "1", "1Gi", false)
	var id string
	e.Eventually("a kexec jump", harness.WaitLong, func() (bool, string) {
		for _, ev := range e.W.Machines.Events() {
			if ev.What == "kexec" {
				id = ev.ServerID
				return true, ""
			}
		}
		return false, e.Summary()
	})
	if err := e.C.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller killed while server %s boots Talos from the kexec jump", id)
	if err := e.C.Restart(); err != nil {
		t.Fatal(err)
	}
	e.WaitBound("jump", 1, harness.WaitLong)
	s := onlyServer(t, e)
	if s.ID != id {
		t.Fatalf("the node runs on %s, the jump was on %s", s.ID, id)
	}
	if got := reboots(e.W.Sim, id); strings.Join(got, ",") != "rescue" {
		t.Errorf("reboots %v, want only the one into rescue", got)
	}
	if n := kexecJumps(e, id); n != 1 {
		t.Errorf("%d kexec jumps, want 1", n)
	}
	phase := ""
	if s, ok := e.W.Sim.Server(id); ok {
		phase = world.TagValue(s.Tags, "karpenter-scaleway-em/phase")
	}
	if phase != string(install.PhaseJoined) {
		t.Errorf("phase %q after the resume, want joined", phase)
	}
	e.AssertNoDuplicateOrders()
	e.AssertNothingLeaked()
}

// nodeReadyStatus is the Ready condition's status of the Node with
// providerID ("" when there is no such Node or it has none).
func nodeReadyStatus(e *harness.Env, providerID string) corev1.ConditionStatus {
	for _, n := range e.Nodes() {
		if n.Spec.ProviderID != providerID {
			continue
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status
			}
		}
	}
	return ""
}

// machineEvents counts what the simulated machine of id did.
func machineEvents(e *harness.Env, id, what string) int {
	n := 0
	for _, ev := range e.W.Machines.Events() {
		if ev.ServerID == id && ev.What == what {
			n++
		}
	}
	return n
}

// Issue 36's trade-off, repaired: a node that kexec booted keeps Scaleway's
// boot type at rescue, so a firmware reboot (here sim.FirmwareReboot: a
// power cut, a console reboot) lands in rescue and the Node goes NotReady.
// The rescueboot controller reboots the server with boot type normal
// through the API once the Node has been NotReady for
// RESCUE_BOOT_REPAIR_AFTER: Talos boots from the disk, the Node is Ready
// again, the kexec record is gone, the NodeClaim has a RescueBootRepaired
// event, the metric counts one repair, and the ledger's I2 holds (the one
// normal reboot after a rescue boot is the repair I2 allows).
func TestKexecFirmwareRebootIntoRescueIsRepaired(t *testing.T) {
	e := harness.Start(t, harness.Setup{
		World:      world.Options{Host: world.HostOptions{NotReadyAfter: time.Second}},
		Controller: world.ControllerOptions{Env: []string{"RESCUE_BOOT_REPAIR_AFTER=3s"}},
	})
	cw := e.WatchClaims(200 * time.Millisecond)
	e.Run("repair", 1, "1", "1Gi", false)
	e.WaitBound("repair", 1, harness.WaitLong)
	s := onlyServer(t, e)
	pid := "scaleway-em://" + s.Zone + "/" + s.ID
	e.Eventually("the kexec-booted node Ready", harness.WaitLong, func() (bool, string) {
		return nodeReadyStatus(e, pid) == corev1.ConditionTrue, e.Summary()
	})
	if kexecJumps(e, s.ID) != 1 || s.BootType != string(baremetal.ServerBootTypeRescue) {
		t.Fatalf("the node did not boot by kexec: %d jumps, boot type %s", kexecJumps(e, s.ID), s.BootType)
	}
	rescues := machineEvents(e, s.ID, "rescue")
	if err := e.W.Sim.FirmwareReboot(s.ID); err != nil {
		t.Fatal(err)
	}
	e.Eventually("the machine back in rescue and its Node not Ready", harness.WaitLong, func() (bool, string) {
		return machineEvents(e, s.ID, "rescue") > rescues && nodeReadyStatus(e, pid) != corev1.ConditionTrue,
			string(nodeReadyStatus(e, pid)) + " " + e.Summary()
	})
	e.Eventually("the Node Ready again after the repair", harness.WaitLong, func() (bool, string) {
		return nodeReadyStatus(e, pid) == corev1.ConditionTrue, strings.Join(reboots(e.W.Sim, s.ID), ",") + " " + e.Summary()
	})
	if got := reboots(e.W.Sim, s.ID); strings.Join(got, ",") != "rescue,normal" {
		t.Errorf("reboots %v, want the install's into rescue and the repair's into normal", got)
	}
	after, _ := e.W.Sim.Server(s.ID)
	if after.BootType != string(baremetal.ServerBootTypeNormal) || world.TagValue(after.Tags, install.TagKexec) != "" {
		t.Errorf("after the repair: boot type %s, tags %v", after.BootType, after.Tags)
	}
	if evs := strings.Join(events(e, "NodeClaim"), "\n"); !strings.Contains(evs, "RescueBootRepaired: ") {
		t.Errorf("no RescueBootRepaired event on the NodeClaim:\n%s", evs)
	}
	text, err := e.C.Metrics(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := `karpenter_scaleway_em_rescue_boot_repairs_total{result="rebooted"} 1`; !strings.Contains(text, want) {
		t.Errorf("metrics lack %s", want)
	}
	e.AssertNoServerTakenFromALiveClaim(cw)
	e.AssertNoDuplicateOrders()
}
