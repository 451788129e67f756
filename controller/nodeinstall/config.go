package nodeinstall

import (
	"context"
	"errors"
	"fmt"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/bootstraptoken"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/kubeversion"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// Configs renders nodes' machine configs.
type Configs struct {
	Secrets client.Reader // join Secrets, read directly (see nodeclass.StatusController)
	API     *scaleway.Client
	// IPv6Gateway for the nodes' static IPv6 route; empty: router advertisements.
	IPv6Gateway string
	// Tokens makes per-NodeClaim bootstrap tokens (NodeClass bootstrapToken: PerNodeClaim).
	Tokens *bootstraptoken.Manager
	// ControlPlane gives the kubelet version of a join Secret that names
	// none (nil: Talos machinery's default).
	ControlPlane kubeversion.ControlPlane
}

// Render is claim's machine config on srv, from the NodeClass, the join
// Secret and what em-imager found.
func (r *Configs) Render(ctx context.Context, claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass, srv *baremetal.Server,
	hw *report.Report, network talosgen.Network) ([]byte, error) {
	join, err := nodeclass.JoinMaterial(ctx, r.Secrets, nc, r.ControlPlane)
	if err != nil {
		return nil, err
	}
	if network.IPv6Gateway == "" {
		network.IPv6Gateway = r.IPv6Gateway
	}
	if network.IPv6Gateway == "" {
		network.IPv6Address = "" // without a gateway a static /128 routes nowhere; leave IPv6 to router advertisements
	}
	if network.PrivateNetworks, err = r.privateNetworks(ctx, srv, nc); err != nil {
		return nil, err
	}
	settings := nodeclass.Settings(nc)
	if nc.Spec.Talos.PerNodeClaimTokens() {
		if r.Tokens == nil {
			return nil, errors.New("per-nodeclaim bootstrap tokens are not enabled in this controller")
		}
		if settings.BootstrapToken, err = r.Tokens.Ensure(ctx, claim.Name); err != nil {
			return nil, err
		}
	}
	// talosgen reads the provider ID from the NodeClaim's status.
	withID := claim.DeepCopy()
	withID.Status.ProviderID = scaleway.ProviderID(srv.Zone, srv.ID)
	out, err := talosgen.Render(join, withID, settings, hw, network)
	if err != nil {
		return nil, err
	}
	return out.Config, nil
}

func (r *Configs) privateNetworks(ctx context.Context, srv *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass) ([]talosgen.PrivateNetwork, error) {
	if len(nc.Spec.PrivateNetworkIDs) == 0 {
		return nil, nil
	}
	list, err := r.API.ListServerPrivateNetworks(ctx, srv.Zone, srv.ID)
	if err != nil {
		return nil, fmt.Errorf("private networks of %s: %w", srv.ID, err)
	}
	vlans := scaleway.VLANs(list)
	var out []talosgen.PrivateNetwork
	for _, id := range nc.Spec.PrivateNetworkIDs {
		v, ok := vlans[id]
		if !ok {
			return nil, fmt.Errorf("private network %s is not attached to server %s", id, srv.ID)
		}
		out = append(out, talosgen.PrivateNetwork{VLAN: uint16(v), DHCP: true})
	}
	return out, nil
}
