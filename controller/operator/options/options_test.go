package options

import (
	"flag"
	"strings"
	"testing"
	"time"

	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
)

func valid() *Options {
	return &Options{ClusterName: "c", RescueSSHPort: 22, TalosAPIPort: 50000, DeliveryTimeout: time.Minute,
		RescueTimeout: time.Minute, ImagingTimeout: time.Minute, BootTimeout: time.Minute, RetryInterval: time.Second,
		CatalogRefresh: time.Minute, GCGracePeriod: 10 * time.Minute, GCInterval: time.Minute, NodeClassRecheck: time.Minute,
		RepairToleration: time.Minute, RescueBootRepairAfter: time.Minute, MaxConcurrentImaging: 1, ZoneSweepInterval: time.Minute,
		BreakerThreshold: 2, BreakerWindow: time.Hour, BreakerBackoff: time.Minute, BreakerMaxBackoff: time.Hour, InstallFailedTTL: time.Hour}
}

func TestValidateNamesEveryBadSetting(t *testing.T) {
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	o := valid()
	o.ClusterName = ""
	o.RescueSSHPort = 70000
	o.ImagingTimeout = 0
	o.RescueBootRepairAfter = 0
	o.JoinSecretNamespaces = "team-a,Team_B"
	o.BreakerThreshold = 0
	o.BreakerMaxBackoff = time.Second
	err := o.Validate()
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, want := range []string{"CLUSTER_NAME", "RESCUE_SSH_PORT", "IMAGING_TIMEOUT", "RESCUE_BOOT_REPAIR_AFTER", "JOIN_SECRET_NAMESPACES", "Team_B",
		"INSTALL_BREAKER_THRESHOLD", "INSTALL_BREAKER_MAX_BACKOFF"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// A grace period of zero would let the garbage collector release a server
// ordered a moment ago.
func TestGCGracePeriodHasAFloor(t *testing.T) {
	for _, d := range []time.Duration{0, time.Second, MinGCGracePeriod - time.Nanosecond} {
		o := valid()
		o.GCGracePeriod = d
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "GC_GRACE_PERIOD") {
			t.Errorf("GCGracePeriod %s: Validate = %v, want an error naming GC_GRACE_PERIOD", d, err)
		}
	}
	o := valid()
	o.GCGracePeriod = MinGCGracePeriod
	if err := o.Validate(); err != nil {
		t.Errorf("the floor itself is refused: %v", err)
	}
}

// Karpenter's env helpers keep the default when a value does not parse;
// CheckEnv says so instead.
func TestCheckEnvRefusesValuesThatDoNotParse(t *testing.T) {
	fs := &coreoptions.FlagSet{FlagSet: flag.NewFlagSet("test", flag.ContinueOnError)}
	(&Options{}).AddFlags(fs)
	(&coreoptions.Options{}).AddFlags(fs)
	env := map[string]string{
		"DELIVERY_TIMEOUT":        "30",    // no unit
		"RESCUE_SSH_PORT":         "ssh",   // not a number
		"BATCH_MAX_DURATION":      "10sec", // Karpenter core's flag
		"GC_INTERVAL":             "2m",    // fine
		"CLUSTER_NAME":            "prod",  // a string: anything goes
		"DISABLE_LEADER_ELECTION": "yes",   // Karpenter's BoolVarWithEnv
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	err := CheckEnv(fs.FlagSet, lookup)
	if err == nil {
		t.Fatal("bad values accepted")
	}
	for _, want := range []string{"DELIVERY_TIMEOUT", "RESCUE_SSH_PORT", "BATCH_MAX_DURATION", "DISABLE_LEADER_ELECTION"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	for _, fine := range []string{"GC_INTERVAL", "CLUSTER_NAME"} {
		if strings.Contains(err.Error(), fine) {
			t.Errorf("error %q names %s, whose value is valid", err, fine)
		}
	}
	delete(env, "DELIVERY_TIMEOUT")
	delete(env, "RESCUE_SSH_PORT")
	delete(env, "BATCH_MAX_DURATION")
	env["DISABLE_LEADER_ELECTION"] = "true"
	if err := CheckEnv(fs.FlagSet, lookup); err != nil {
		t.Errorf("valid values refused: %v", err)
	}
}

func TestJoinNamespaces(t *testing.T) {
	o := valid()
	o.SystemNamespace = "karpenter"
	if got := o.JoinNamespaces(); len(got) != 1 || got[0] != "karpenter" {
		t.Errorf("default join namespaces %v, want the system namespace", got)
	}
	o.JoinSecretNamespaces = " team-a, team-b ,team-a,"
	if got := strings.Join(o.JoinNamespaces(), ","); got != "team-a,team-b" {
		t.Errorf("join namespaces %q", got)
	}
}
