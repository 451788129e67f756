package spare

import (
	"context"
	"fmt"
	"strconv"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// TagRescuePending marks a spare that may still run (or be booting) the
// node of the NodeClaim it was kept from. A NodeClaim deleted while its
// server boots Talos leaves a server whose reboot into rescue the API
// refuses (it is "starting"): Talos then comes up and registers a Node with
// the server's providerID that no NodeClaim owns. Karpenter core matches a
// NodeClaim to its Node by providerID alone, so the next NodeClaim taking
// that spare would be "registered" against the stale Node and its install
// would never run. While the tag is set the spare is neither taken nor
// offered (Takeable); Settle reboots it into rescue, deletes any Node with
// its providerID, and only then removes the tag.
//
// Its value is rescueDue while the reboot is still to be asked, then the
// Unix time at which the API accepted it (while a Node is left to go).
const TagRescuePending = "karpenter-scaleway-em/rescue-pending"

const rescueDue = "due"

// RescuePending reports whether spare srv may still run its old node
// (TagRescuePending).
func RescuePending(srv *baremetal.Server) bool {
	_, ok := scaleway.TagValue(srv.Tags, TagRescuePending)
	return ok
}

// undelivered reports whether srv is still being delivered: ordered without
// an OS (install: null), it has booted nothing yet and its disk holds no
// node.
func undelivered(srv *baremetal.Server) bool {
	switch srv.Status {
	case baremetal.ServerStatusOrdered, baremetal.ServerStatusDelivering, baremetal.ServerStatusOutOfStock:
		return true
	}
	return false
}

// Settle goes on with spare zone/id's return to rescue (TagRescuePending):
// the garbage collector calls it on every sweep for each such spare. A
// server that is no longer a pending spare of this cluster is left alone.
func (k *Keeper) Settle(ctx context.Context, zone scw.Zone, id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	defer k.hold(id)()
	srv, err := k.API.GetServer(ctx, zone, id)
	if scaleway.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	srv, mine, err := k.Owner.Check(ctx, srv)
	if err != nil {
		return err
	}
	if !mine || install.PhaseOf(srv) != install.PhaseSpare || !RescuePending(srv) || srv.Status == baremetal.ServerStatusDeleting {
		return nil
	}
	return k.settle(ctx, srv)
}

// settle takes spare srv, as read now, as far back to rescue as it can: ask
// the reboot once the server can take it (ready), then delete the Nodes
// with its providerID and clear the tag once none is left. It waits
// (returns nil, the tag stays) whenever a step cannot be taken yet; a
// failed reboot is logged and tried again at the next sweep. Callers hold
// k.mu and the spare (hold).
func (k *Keeper) settle(ctx context.Context, srv *baremetal.Server) error {
	log := k.Log.WithValues("server", srv.ID, "zone", string(srv.Zone), "offer", srv.OfferName)
	was, _ := scaleway.TagValue(srv.Tags, TagRescuePending)
	value, wait, err := k.rebootIntoRescue(ctx, srv, log, was)
	if wait || err != nil {
		return err
	}
	// The reboot was accepted: Talos stops and cannot register again. A
	// Node it registered is stale (a spare has no NodeClaim).
	providerID := scaleway.ProviderID(srv.Zone, srv.ID)
	left, err := k.removeNodes(ctx, providerID)
	if err == nil && left > 0 {
		log.Info("a kept spare's old node is still being deleted; the spare is taken once it is gone", "providerID", providerID)
	}
	if err != nil || left > 0 {
		return k.waitForNodes(ctx, srv, value, was, err)
	}
	return k.clearPending(ctx, srv, log)
}

// rebootIntoRescue is settle's first step. A pending tag without a time
// means the reboot is still to ask: it is asked once the server is ready,
// and value is then the time it was accepted. A server booted normally
// since its reboot is marked due again. wait says settle stops here for now.
func (k *Keeper) rebootIntoRescue(ctx context.Context, srv *baremetal.Server, log logr.Logger, pending string) (value string, wait bool, err error) {
	if _, err := strconv.ParseInt(pending, 10, 64); err == nil {
		if srv.Status == baremetal.ServerStatusReady && srv.BootType != baremetal.ServerBootTypeRescue {
			// Booted normally since the reboot into rescue (nothing of this
			// controller does that to a spare, but the disk's Talos runs
			// again): reboot it again.
			return pending, true, k.setPending(ctx, srv, rescueDue)
		}
		return pending, false, nil
	}
	if srv.Status != baremetal.ServerStatusReady {
		// Mid-reboot (the install's reboot into Talos), stopped,
		// locked...: the API refuses a reboot now, and the disk's Talos
		// may come up. The next sweep looks again.
		log.Info("a kept spare cannot be rebooted into rescue yet; it is not taken until it is", "status", string(srv.Status))
		return pending, true, nil
	}
	// No SSH key: nothing logs into a spare's rescue (the install that
	// takes it boots rescue again with the key), so the IAM key is not
	// registered for the weeks a spare may wait.
	if _, err := k.Rescue.RebootIntoRescue(ctx, k.API, srv, nil); err != nil {
		log.Error(err, "rebooting a kept spare into rescue failed; it is not taken until it is in rescue, and the garbage collector tries again")
		return pending, true, nil
	}
	return strconv.FormatInt(k.clock().Now().Unix(), 10), false, nil
}

// waitForNodes records a newly accepted reboot (value differs from the tag
// as read, was) while the spare's old Node is still there, and reports
// removeErr, the error deleting it, if any.
func (k *Keeper) waitForNodes(ctx context.Context, srv *baremetal.Server, value, was string, removeErr error) error {
	if value != was {
		if werr := k.setPending(ctx, srv, value); werr != nil {
			return werr
		}
	}
	if removeErr != nil {
		return fmt.Errorf("deleting the node left on spare %s: %w", srv.ID, removeErr)
	}
	return nil
}

// clearPending removes the pending tag of a spare that is still one: it is
// in rescue with no node left, so takeable.
func (k *Keeper) clearPending(ctx context.Context, srv *baremetal.Server, log logr.Logger) error {
	cleared := false
	if _, err := k.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		if install.PhaseOf(&baremetal.Server{Tags: tags}) != install.PhaseSpare {
			return tags, false
		}
		tags, cleared = scaleway.RemoveTagIn(tags, TagRescuePending)
		return tags, cleared
	}); err != nil && !scaleway.IsNotFound(err) {
		return fmt.Errorf("marking spare %s as in rescue: %w", srv.ID, err)
	}
	if cleared {
		k.changed(srv.Zone)
		log.Info("a kept spare is rebooting into rescue and no node of it is left: it can be taken")
	}
	return nil
}

// setPending writes value into srv's TagRescuePending while it is a spare
// still pending.
func (k *Keeper) setPending(ctx context.Context, srv *baremetal.Server, value string) error {
	_, err := k.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		if install.PhaseOf(&baremetal.Server{Tags: tags}) != install.PhaseSpare || !RescuePending(&baremetal.Server{Tags: tags}) {
			return tags, false
		}
		return scaleway.SetTagIn(tags, TagRescuePending, value)
	})
	if err != nil && !scaleway.IsNotFound(err) {
		return fmt.Errorf("recording the reboot into rescue of spare %s: %w", srv.ID, err)
	}
	return nil
}

// removeNodes deletes every Node with providerID (a spare has no NodeClaim:
// any such Node is stale) and says how many are still there afterwards
// (a finalizer holds them). Without Nodes, none is known.
func (k *Keeper) removeNodes(ctx context.Context, providerID string) (int, error) {
	if k.Nodes == nil {
		return 0, nil
	}
	find := func() ([]corev1.Node, error) {
		nodes := &corev1.NodeList{}
		if err := k.Nodes.List(ctx, nodes); err != nil {
			return nil, err
		}
		var out []corev1.Node
		for _, n := range nodes.Items {
			if n.Spec.ProviderID == providerID {
				out = append(out, n)
			}
		}
		return out, nil
	}
	stale, err := find()
	if err != nil || len(stale) == 0 {
		return 0, err
	}
	for i := range stale {
		if stale[i].DeletionTimestamp != nil {
			continue
		}
		if err := k.Nodes.Delete(ctx, &stale[i]); client.IgnoreNotFound(err) != nil {
			return 0, err
		}
		k.Log.Info("deleted the node a kept spare left behind (registered after its nodeclaim was deleted): a nodeclaim taking the spare would be matched to it",
			"node", stale[i].Name, "providerID", providerID)
	}
	stale, err = find()
	return len(stale), err
}
