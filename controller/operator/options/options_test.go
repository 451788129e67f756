package options

import (
	"strings"
	"testing"
	"time"
)

func valid() *Options {
	return &Options{ClusterName: "c", RescueSSHPort: 22, TalosAPIPort: 50000, DeliveryTimeout: time.Minute,
		RescueTimeout: time.Minute, ImagingTimeout: time.Minute, BootTimeout: time.Minute, RetryInterval: time.Second,
		CatalogRefresh: time.Minute, GCInterval: time.Minute, NodeClassRecheck: time.Minute, RepairToleration: time.Minute,
		MaxConcurrentImaging: 1, ZoneSweepInterval: time.Minute}
}

func TestValidateNamesEveryBadSetting(t *testing.T) {
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	o := valid()
	o.ClusterName = ""
	o.RescueSSHPort = 70000
	o.ImagingTimeout = 0
	o.JoinSecretNamespaces = "team-a,Team_B"
	err := o.Validate()
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, want := range []string{"CLUSTER_NAME", "RESCUE_SSH_PORT", "IMAGING_TIMEOUT", "JOIN_SECRET_NAMESPACES", "Team_B"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
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
