package identity

import (
	"context"
	"fmt"
	"sort"
	"strings"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// RecordName is the ConfigMap, in the controller's namespace, that records
// the identity and name the controller last started with: the only way to
// tell a changed CLUSTER_ID (servers of the previous identity are this
// cluster's) from another cluster sharing the name (its servers are not).
const RecordName = "karpenter-scaleway-em-identity"

// Record keys.
const (
	recordID   = "clusterID"
	recordName = "clusterName"
)

// ChangedError refuses a start whose identity differs from the recorded one
// while servers still carry the recorded one: this controller would no
// longer see them (they stay billed, nothing collects them) and would order
// replacements for their NodeClaims.
type ChangedError struct {
	Previous, Current Identity
	// Servers are "<zone>/<id>" of the servers with the previous identity.
	Servers []string
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("the cluster identity changed from %q to %q (CLUSTER_ID) while %d servers carry the previous one (%s): "+
		"this controller would no longer manage them (they stay billed) and would order replacements. "+
		"Set CLUSTER_ID back to %q (unset it if %q was the kube-system namespace's UID) and restart; "+
		"if the new identity is intended, first retag those servers %s (or delete them), then restart",
		e.Previous.ID, e.Current.ID, len(e.Servers), strings.Join(e.Servers, ", "),
		e.Previous.ID, e.Previous.ID, scaleway.Tag(scaleway.TagClusterID, e.Current.ID))
}

// Start checks the cluster's identity against the one recorded at the
// previous start (ConfigMap RecordName in namespace, read and written with
// kube) and records the current one. A changed identity is refused
// (*ChangedError) while any server of zones carries the previous one with
// this cluster's name or the recorded name; with none left it is accepted.
// A changed name is logged: the servers keep their identity and are
// retagged with the new name as they are seen (Mine, SweepRenamed), starting
// with a sweep of zones here. A zone that cannot be listed is logged and
// skipped (like the inventory's sweep: the catalogue names zones the
// credentials may not serve).
func (o *Owner) Start(ctx context.Context, kube client.Client, namespace string, zones []string) error {
	key := types.NamespacedName{Namespace: namespace, Name: RecordName}
	cm := &corev1.ConfigMap{}
	err := kube.Get(ctx, key, cm)
	found := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the recorded cluster identity (ConfigMap %s): %w", key, err)
	}
	prev := Identity{ID: cm.Data[recordID], Name: cm.Data[recordName]}
	if found {
		if err := o.checkPrevious(ctx, prev, zones); err != nil {
			return err
		}
	}
	o.sweepRenamedZones(ctx, zones)
	if found && prev == o.Identity {
		return nil
	}
	o.record(ctx, kube, key, cm, found)
	return nil
}

// checkPrevious compares the recorded identity prev with this one: a
// changed ID is refused while live servers carry the previous one; a
// changed name is only logged (the servers are retagged).
func (o *Owner) checkPrevious(ctx context.Context, prev Identity, zones []string) error {
	if prev.ID != "" && prev.ID != o.ID {
		held, err := o.carrying(ctx, prev, zones)
		if err != nil {
			return err
		}
		if len(held) > 0 {
			return &ChangedError{Previous: prev, Current: o.Identity, Servers: held}
		}
		o.Log.Info("the cluster identity changed; no server carries the previous one", "previous", prev.ID, "identity", o.ID)
	}
	if prev.Name != "" && prev.Name != o.Name {
		o.Log.Info("the cluster was renamed: its servers keep their identity and are retagged with the new name",
			"previous", prev.Name, "name", o.Name, "identity", o.ID)
	}
	return nil
}

// sweepRenamedZones retags, zone by zone, servers recorded under a previous
// name; a zone that cannot be listed is left to the inventory's sweeps.
func (o *Owner) sweepRenamedZones(ctx context.Context, zones []string) {
	for _, z := range zones {
		if _, err := o.SweepRenamed(ctx, scw.Zone(z)); err != nil {
			o.Log.V(1).Info("cannot look for servers of this cluster under a previous name; the inventory's sweeps try again", "zone", z, "error", err.Error())
		}
	}
}

// record writes this identity into the record ConfigMap cm (created when
// not found). A failure is logged: the check is done; only the next
// start's is weakened.
func (o *Owner) record(ctx context.Context, kube client.Client, key types.NamespacedName, cm *corev1.ConfigMap, found bool) {
	data := map[string]string{recordID: o.ID, recordName: o.Name}
	var err error
	if !found {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: RecordName}, Data: data}
		err = kube.Create(ctx, cm)
	} else {
		cm.Data = data
		err = kube.Update(ctx, cm)
	}
	if err != nil {
		o.Log.Error(err, "WARNING: cannot record the cluster identity: a later change of CLUSTER_ID would not be caught at start", "configmap", key.String())
	}
}

// carrying lists "<zone>/<id>" of the live servers in zones with identity
// prev and this cluster's name or prev's. Servers with that identity and
// another name belong to a cluster that shares it: not this one's concern.
func (o *Owner) carrying(ctx context.Context, prev Identity, zones []string) ([]string, error) {
	var held []string
	for _, z := range zones {
		srvs, err := o.API.ListServers(ctx, scw.Zone(z), []string{scaleway.Tag(scaleway.TagClusterID, prev.ID)})
		if err != nil {
			o.Log.V(1).Info("cannot look for servers of the previous cluster identity", "zone", z, "error", err.Error())
			continue
		}
		for _, s := range srvs {
			name, _ := scaleway.TagValue(s.Tags, scaleway.TagManagedBy)
			if s.Status == baremetal.ServerStatusDeleting || (name != o.Name && name != prev.Name) {
				continue
			}
			held = append(held, z+"/"+s.ID)
		}
	}
	sort.Strings(held)
	return held, nil
}
