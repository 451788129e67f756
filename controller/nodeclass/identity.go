package nodeclass

import (
	"fmt"
	"strings"

	"github.com/awslabs/operatorpkg/status"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
)

// Reasons of ClusterIdentityUnique=False.
const (
	// ReasonForeignServers: servers carry this cluster's name and another
	// cluster's identity: two clusters use one name.
	ReasonForeignServers = "ForeignServers"
	// ReasonServersWithoutIdentity: servers carry this cluster's name, no
	// identity, and no NodeClaim of this cluster names them.
	ReasonServersWithoutIdentity = "ServersWithoutIdentity"
)

// maxListed servers are named in the message; the rest are counted.
const maxListed = 5

// setIdentityCondition reports, on every NodeClass, the servers the
// identity rule leaves alone: a name shared by two clusters concerns all of
// them. It is not a part of Ready (see ConditionTypeClusterIdentityUnique).
func (c *StatusController) setIdentityCondition(conds status.ConditionSet) {
	var alone []identity.LeftAlone
	if c.LeftAlone != nil {
		alone = c.LeftAlone()
	}
	if len(alone) == 0 {
		// Shown once there was something to say: a cluster that never had
		// a namesake gets no condition (nor its event).
		if conds.Get(v1alpha1.ConditionTypeClusterIdentityUnique) != nil {
			conds.SetTrue(v1alpha1.ConditionTypeClusterIdentityUnique)
		}
		return
	}
	reason := ReasonServersWithoutIdentity
	var names []string
	for i, a := range alone {
		if a.Reason == identity.ReasonForeignIdentity {
			reason = ReasonForeignServers
		}
		if i < maxListed {
			id := a.ClusterID
			if id == "" {
				id = "none"
			}
			names = append(names, fmt.Sprintf("%s/%s (identity %s)", a.Zone, a.ID, id))
		}
	}
	if len(alone) > maxListed {
		names = append(names, fmt.Sprintf("and %d more", len(alone)-maxListed))
	}
	msg := fmt.Sprintf("%d server(s) carry this cluster's name but are not its own; they are left alone (never listed, collected, reused or released): %s", len(alone), strings.Join(names, ", "))
	if reason == ReasonForeignServers {
		msg += ". Another cluster uses this cluster's name: give one of them another clusterName"
	} else {
		msg += ". Ordered before cluster identities and named by no NodeClaim: set ADOPT_SERVERS_WITHOUT_IDENTITY=true on the cluster that ordered them, or release them by hand"
	}
	conds.SetFalse(v1alpha1.ConditionTypeClusterIdentityUnique, reason, msg)
}
