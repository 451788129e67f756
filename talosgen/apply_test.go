package talosgen

import (
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// TestApplyWorkerCluster pins what a worker-config join secret overrides in
// the cluster section: only what it names, keeping the base's other values,
// and discovery only when the NodeClass sets it.
func TestApplyWorkerCluster(t *testing.T) {
	base := func() *v1alpha1.ClusterConfig {
		return &v1alpha1.ClusterConfig{ClusterNetwork: &v1alpha1.ClusterNetworkConfig{
			DNSDomain: "cluster.local", PodSubnet: []string{"10.244.0.0/16"}, ServiceSubnet: []string{"10.96.0.0/12"},
		}}
	}

	cl := base()
	applyWorkerCluster(cl, &JoinMaterial{podCIDR: []string{"10.50.0.0/16"}}, nil)
	n := cl.ClusterNetwork
	if !slices.Equal(n.PodSubnet, []string{"10.50.0.0/16"}) || n.DNSDomain != "cluster.local" ||
		!slices.Equal(n.ServiceSubnet, []string{"10.96.0.0/12"}) || cl.ClusterDiscoveryConfig != nil {
		t.Fatalf("pod CIDR only: %+v, discovery %+v", n, cl.ClusterDiscoveryConfig)
	}

	cl = &v1alpha1.ClusterConfig{}
	off := false
	applyWorkerCluster(cl, &JoinMaterial{dnsDomain: "corp.internal", serviceCIDR: []string{"10.97.0.0/16"}}, &off)
	n = cl.ClusterNetwork
	if n == nil || n.DNSDomain != "corp.internal" || !slices.Equal(n.ServiceSubnet, []string{"10.97.0.0/16"}) || n.PodSubnet != nil {
		t.Fatalf("DNS domain and service CIDR on an empty section: %+v", n)
	}
	if d := cl.ClusterDiscoveryConfig; d == nil || d.DiscoveryEnabled == nil || *d.DiscoveryEnabled {
		t.Fatalf("discovery off: %+v", d)
	}
	off = true // the config holds its own copy
	if *cl.ClusterDiscoveryConfig.DiscoveryEnabled {
		t.Fatal("discovery follows the caller's variable")
	}

	cl = &v1alpha1.ClusterConfig{}
	applyWorkerCluster(cl, &JoinMaterial{}, nil)
	if cl.ClusterNetwork != nil || cl.ClusterDiscoveryConfig != nil {
		t.Fatalf("nothing named, something written: %+v", cl)
	}
}
