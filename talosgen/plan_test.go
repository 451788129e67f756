package talosgen

import (
	"strings"
	"testing"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestPlanFirstErrorWins: plan checks its inputs in a fixed order, and with
// several faults the first in that order is the one reported (the
// NodeClaim, then the settings and network, then the hardware report).
func TestPlanFirstErrorWins(t *testing.T) {
	join := freshJoin(t)
	failed := testReport()
	failed.OK, failed.Error = false, &report.Error{Code: "disk-busy"}
	noDisk := testReport()
	noDisk.Disk = &report.Disk{}
	badNet := Network{IPv6Address: "not-an-address"}
	claim := testNodeClaim("n")
	for _, tc := range []struct {
		name string
		nc   *karpv1.NodeClaim
		hw   *report.Report
		net  Network
		want string
	}{
		{"nil claim before nil report", nil, nil, badNet, "nodeclaim is nil"},
		{"nil report", claim, nil, badNet, "hardware report is nil"},
		{"hostname before the network", testNodeClaim("Not_A_Host"), failed, badNet, "not usable as a hostname"},
		{"network before a failed report", claim, failed, badNet, "not-an-address"},
		{"failed report", claim, failed, testNetwork(), "em-imager failed (disk-busy)"},
		{"report without a disk", claim, noDisk, testNetwork(), "no install disk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := plan(join, tc.nc, NodeSettings{}, tc.hw, tc.net); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestPlanDecides: what plan decides for a good node, before anything is
// built: the disk labels over the NodeClaim's, the install disk, the join
// secret's token (none of the NodeClaim's own) and discovery as set.
func TestPlanDecides(t *testing.T) {
	p, err := plan(freshJoin(t), testNodeClaim("bare-metal-abcde"), NodeSettings{}, testReport(), testNetwork())
	if err != nil {
		t.Fatal(err)
	}
	if p.installDisk != "/dev/nvme0n1" || p.token != "" || p.uplink == nil || p.uplink.name != "eth0" {
		t.Fatalf("plan %+v", p)
	}
	for k, v := range p.disks.labels {
		if p.labels[k] != v {
			t.Fatalf("label %s = %q, the disks say %q", k, p.labels[k], v)
		}
	}
}

// TestJoinPlan: the token and discovery decisions, without rendering.
func TestJoinPlan(t *testing.T) {
	bundled := freshJoin(t)
	bundle, _ := freshBundle(t)
	caOnly, err := ParseJoinSecret("tenants/t", map[string][]byte{KeyKubernetesCA: bundle.Certs.K8s.Crt, KeyEndpoint: []byte(testEndpoint)})
	if err != nil {
		t.Fatal(err)
	}
	on, off := true, false
	for _, tc := range []struct {
		name      string
		join      *JoinMaterial
		settings  normalized
		token     string
		discovery *bool
		err       string
	}{
		{name: "bundle: discovery as set", join: bundled, settings: normalized{NodeSettings: NodeSettings{ClusterDiscovery: &on}}, discovery: &on},
		{name: "bundle: unset stays unset", join: bundled},
		{name: "the NodeClaim's own token", join: caOnly, settings: normalized{NodeSettings: NodeSettings{BootstrapToken: "abcdef.0123456789abcdef"}}, token: "abcdef.0123456789abcdef", discovery: &off},
		{name: "no token anywhere", join: caOnly, err: "missing key token"},
		{name: "discovery without Talos secrets", join: caOnly, settings: normalized{NodeSettings: NodeSettings{BootstrapToken: "abcdef.0123456789abcdef", ClusterDiscovery: &on}}, err: "clusterDiscovery: needs the cluster's Talos secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, discovery, err := joinPlan(tc.join, &tc.settings)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || token != tc.token || (discovery == nil) != (tc.discovery == nil) || (discovery != nil && *discovery != *tc.discovery) {
				t.Fatalf("joinPlan = %q %v %v", token, discovery, err)
			}
		})
	}
}
