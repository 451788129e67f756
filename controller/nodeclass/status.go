package nodeclass

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/joinsecret"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/kubeversion"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// ImageChecker reads and validates a NodeClass's image manifest (*imagesource.Source).
type ImageChecker interface {
	Resolve(ctx context.Context, s imagesource.Settings) (*imagesource.Image, error)
}

// CredentialsChecker proves the Scaleway credentials work in the zones (and
// project-wide, once).
type CredentialsChecker interface {
	CheckCredentials(ctx context.Context, zones []scw.Zone) error
}

// StatusController keeps NodeClass status current: each sub-condition of
// Ready, the resolved image, and the hash annotation used for drift.
type StatusController struct {
	Kube client.Client
	// Secrets reads join Secrets directly (not through the informer cache,
	// which would need list/watch on every Secret of the cluster), within the
	// allowed namespaces (a joinsecret.Reader).
	Secrets     client.Reader
	Images      ImageChecker
	Credentials CredentialsChecker
	DefaultZone string
	// ProjectID is the controller's Scaleway project. Servers are ordered and
	// listed in it only; a NodeClass naming another project is not Ready
	// (listing one project and ordering in another would hide orders from the
	// idempotency lookup).
	ProjectID string
	// Interval between checks of a Ready NodeClass (a NodeClass that is not
	// Ready is checked sooner).
	Interval time.Duration
	// Recorder receives an event for each condition that changes (nil: none).
	Recorder events.Recorder
	// Installs sets InstallsHealthy from the install-failure breaker's state (a *breaker.Store); nil: always True.
	Installs InstallsBreaker
	// LeftAlone lists the servers with this cluster's name that are not
	// its own (identity.Owner.LeftAlone; nil: none).
	LeftAlone func() []identity.LeftAlone
	// ControlPlane reads the API server's version: the kubelet version of a
	// join Secret that names none, and what the kubelet's is checked
	// against (nil: neither, for tests).
	ControlPlane kubeversion.ControlPlane
}

// InstallsBreaker keeps InstallsHealthy (*breaker.Store): Sync drops a stale
// breaker state, sets the condition, and says when it changes by itself
// (Unix nanoseconds; 0: never).
type InstallsBreaker interface {
	Sync(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) int64
}

// Reconcile implements reconcile.ObjectReconciler.
func (c *StatusController) Reconcile(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) (reconcile.Result, error) {
	if err := nc.Unreadable(); err != nil {
		return c.reportUnreadable(ctx, nc, err)
	}
	stored, stop, err := c.stampHash(ctx, nc)
	if stop {
		return reconcile.Result{}, err
	}
	c.restampClaims(ctx, nc, nc.Annotations[v1alpha1.AnnotationNodeClassHash])

	conds := nc.StatusConditions()
	nc.Status.Zones = nc.ZonesOr(c.DefaultZone)

	setCondition(conds, v1alpha1.ConditionTypeProjectReady, ReasonProjectMismatch, projectMismatch(nc.Spec.ProjectID, c.ProjectID))

	zones := make([]scw.Zone, len(nc.Status.Zones))
	for i, z := range nc.Status.Zones {
		zones[i] = scw.Zone(z)
	}
	credErr := c.Credentials.CheckCredentials(ctx, zones)
	setCondition(conds, v1alpha1.ConditionTypeCredentialsReady, ReasonScalewayAPIUnavailable, credErr)

	imgErr := c.resolveImage(ctx, nc)
	setCondition(conds, v1alpha1.ConditionTypeImageReady, string(imagesource.ReasonOf(imgErr)), imgErr)

	joinErr := c.checkJoinConfig(ctx, nc)
	setCondition(conds, v1alpha1.ConditionTypeJoinConfigReady, joinReason(joinErr), joinErr)

	breakerChange := c.syncInstalls(ctx, nc, conds)
	c.setIdentityCondition(conds)

	if !equality.Semantic.DeepEqual(stored.Status, nc.Status) {
		if err := c.Kube.Status().Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		// Only once the new status is stored: a conflict retries the
		// reconcile, which would announce the same change twice.
		c.publishTransitions(stored, nc)
	}
	return reconcile.Result{RequeueAfter: c.requeueAfter(ctx, nc, conds, breakerChange)}, nil
}

// stampHash writes the NodeClass's hash annotations when they changed and
// returns the object as stored; stop says the reconcile ends here (the
// patch failed, err, or the NodeClass is gone, nil).
func (c *StatusController) stampHash(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) (stored *v1alpha1.ScalewayElasticMetalNodeClass, stop bool, err error) {
	stored = nc.DeepCopy()
	if nc.Annotations == nil {
		nc.Annotations = map[string]string{}
	}
	nc.Annotations[v1alpha1.AnnotationNodeClassHash] = nc.Hash()
	nc.Annotations[v1alpha1.AnnotationNodeClassHashVersion] = v1alpha1.NodeClassHashVersion
	if equality.Semantic.DeepEqual(stored.Annotations, nc.Annotations) {
		return stored, false, nil
	}
	if err := c.Kube.Patch(ctx, nc, client.MergeFrom(stored)); err != nil {
		return nil, true, client.IgnoreNotFound(err)
	}
	return nc.DeepCopy(), false, nil
}

// projectMismatch refuses a spec.projectID that is not the controller's:
// one controller serves one project.
func projectMismatch(spec, controller string) error {
	if spec == "" || controller == "" || spec == controller {
		return nil
	}
	return fmt.Errorf("spec.projectID %s is not the controller's project %s (SCW_DEFAULT_PROJECT_ID): one controller serves one project; leave spec.projectID empty or run a controller per project", spec, controller)
}

// resolveImage resolves the NodeClass's image into its status; the error is
// ImageReady's.
func (c *StatusController) resolveImage(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) error {
	img, err := c.Images.Resolve(ctx, ImageSettings(nc))
	if err != nil {
		return err
	}
	nc.Status.Image = &v1alpha1.ResolvedImage{
		SchematicID: img.SchematicID, TalosVersion: img.TalosVersion, Architecture: img.Arch,
		Format: img.Format, RawSHA256: img.RawSHA256, RawSize: img.RawSize,
	}
	if nc.Spec.Talos.DiskConfigDelivery() {
		// Booted without talos.config=metal-iso, the node would ignore
		// the config on its disk (reason ImageLacksMetalISO).
		return img.DiskConfigDelivery()
	}
	return nil
}

// syncInstalls brings InstallsHealthy up to date and returns when the
// install-failure breaker changes next (zero: not scheduled).
func (c *StatusController) syncInstalls(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, conds status.ConditionSet) time.Time {
	if c.Installs == nil {
		conds.SetTrue(v1alpha1.ConditionTypeInstallsHealthy)
		return time.Time{}
	}
	if at := c.Installs.Sync(ctx, nc); at != 0 {
		return time.Unix(0, at)
	}
	return time.Time{}
}

// requeueAfter is when to look again: Interval (5 minutes by default), at
// most 30s while not Ready, and just after the breaker's next change.
func (c *StatusController) requeueAfter(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, conds status.ConditionSet, breakerChange time.Time) time.Duration {
	interval := c.Interval
	if interval == 0 {
		interval = 5 * time.Minute
	}
	if !conds.Root().IsTrue() {
		log.FromContext(ctx).Info("nodeclass not ready", "nodeclass", nc.Name, "reason", conds.Root().Reason, "message", conds.Root().Message)
		interval = min(interval, 30*time.Second)
	}
	if !breakerChange.IsZero() {
		// The end of a backoff turns InstallsHealthy True for the probe.
		interval = max(min(interval, time.Until(breakerChange)+time.Second), time.Second)
	}
	return interval
}

// restampClaims moves the NodeClass's NodeClaims stamped by an older way of
// hashing to today's hash of the NodeClass. Drift compares hashes of the same
// version only, so without this a claim stamped before an upgrade of the
// controller would never drift on the NodeClass again; comparing across
// versions would drift every node at once for the change of hashing alone,
// each a new server. A claim already marked drifted keeps its stamp: it is
// being replaced for a change made before the upgrade. Errors are logged
// only: the next reconcile tries again, and the status must not wait.
// hash is the NodeClass's current one, stamped on it just before.
func (c *StatusController) restampClaims(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, hash string) {
	claims := &karpv1.NodeClaimList{}
	if err := c.Kube.List(ctx, claims); err != nil {
		if !meta.IsNoMatchError(err) {
			log.FromContext(ctx).Error(err, "listing nodeclaims to restamp their nodeclass hash", "nodeclass", nc.Name)
		}
		return
	}
	for i := range claims.Items {
		claim := &claims.Items[i]
		ref := claim.Spec.NodeClassRef
		version := claim.Annotations[v1alpha1.AnnotationNodeClassHashVersion]
		if ref == nil || ref.Name != nc.Name || version == "" || version == v1alpha1.NodeClassHashVersion ||
			claim.StatusConditions().Get(karpv1.ConditionTypeDrifted).IsTrue() {
			continue
		}
		stored := claim.DeepCopy()
		claim.Annotations[v1alpha1.AnnotationNodeClassHash] = hash
		claim.Annotations[v1alpha1.AnnotationNodeClassHashVersion] = v1alpha1.NodeClassHashVersion
		if err := c.Kube.Patch(ctx, claim, client.MergeFrom(stored)); client.IgnoreNotFound(err) != nil {
			log.FromContext(ctx).Error(err, "restamping a nodeclaim's nodeclass hash", "nodeclaim", claim.Name, "nodeclass", nc.Name)
			continue
		}
		log.FromContext(ctx).Info("restamped a nodeclaim's nodeclass hash", "nodeclaim", claim.Name, "nodeclass", nc.Name,
			"from", version, "to", v1alpha1.NodeClassHashVersion)
	}
}

// ReasonSpecUnreadable: the NodeClass holds a value this controller cannot
// decode (stored before the CRD refused it).
const ReasonSpecUnreadable = "SpecUnreadable"

// reportUnreadable is the whole reconcile of a NodeClass holding values the
// controller could not decode (v1alpha1's UnmarshalJSON left them zero): it
// is not Ready, so Karpenter creates no NodeClaim for it and Create orders
// nothing, and it gets no hash (drift would compare a spec that lost values).
// Nothing else is checked: the other NodeClasses keep working, and the edit
// that fixes this one reconciles it again.
func (c *StatusController) reportUnreadable(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, cause error) (reconcile.Result, error) {
	log.FromContext(ctx).Error(cause, "nodeclass skipped: it holds values the controller cannot read", "nodeclass", nc.Name)
	stored := nc.DeepCopy()
	// The sub-conditions were not checked: Unknown, saying why, so that
	// whoever reads the conditions (Karpenter core, kubectl) sees Ready
	// False and not a Ready recomputed from stale sub-conditions.
	conds := nc.StatusConditions()
	for _, cond := range nc.GetConditions() {
		if cond.Type != status.ConditionReady && conds.IsDependentCondition(cond.Type) {
			conds.SetUnknownWithReason(cond.Type, ReasonSpecUnreadable, "not checked: the NodeClass holds values this controller cannot read")
		}
	}
	conds.SetFalse(status.ConditionReady, ReasonSpecUnreadable, cause.Error())
	if !equality.Semantic.DeepEqual(stored.Status, nc.Status) {
		if err := c.Kube.Status().Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		// One event, the root's: five "not checked" would say nothing more.
		was := stored.StatusConditions(status.WithObservedOnly()).Get(status.ConditionReady)
		now := conds.Get(status.ConditionReady)
		if c.Recorder != nil && (was == nil || was.Status != now.Status || was.Reason != now.Reason) {
			c.Recorder.Publish(*conditionEvent(nc, *now, was))
		}
	}
	return reconcile.Result{}, nil
}

func setCondition(conds status.ConditionSet, typ, reason string, err error) {
	if err == nil {
		conds.SetTrue(typ)
		return
	}
	conds.SetFalse(typ, reason, err.Error())
}

// Reasons of JoinConfigReady=False.
const (
	// ReasonJoinSecretNotAllowed: the Secret is outside the namespaces join
	// Secrets may be in (JOIN_SECRET_NAMESPACES), or is the controller's own.
	ReasonJoinSecretNotAllowed = "JoinSecretNotAllowed"
	// ReasonJoinSecretForbidden: allowed by the controller's setting, refused
	// by its RBAC (the setting and the chart's Roles disagree).
	ReasonJoinSecretForbidden = "JoinSecretForbidden"
	// ReasonJoinConfigInvalid: the Secret is missing or does not render a valid config.
	ReasonJoinConfigInvalid = "JoinConfigInvalid"
	// ReasonVersionSkew: the kubelet version nodes would get is newer than
	// the API server, too old for it, or not supported by the image's Talos.
	ReasonVersionSkew = "VersionSkew"
)

func joinReason(err error) string {
	var notAllowed *joinsecret.NotAllowedError
	var skew *kubeversion.SkewError
	switch {
	case errors.As(err, &notAllowed):
		return ReasonJoinSecretNotAllowed
	case errors.As(err, &skew):
		return ReasonVersionSkew
	case apierrors.IsForbidden(err):
		return ReasonJoinSecretForbidden
	}
	return ReasonJoinConfigInvalid
}

// checkJoinConfig renders a config for a made-up node and checks its kubelet
// version, so a broken Secret or patch, or a kubelet that could not join,
// shows on the NodeClass before any server is ordered.
func (c *StatusController) checkJoinConfig(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) error {
	// One read of the API server's version serves the default and the check.
	var cp string
	var controlPlane kubeversion.ControlPlane
	if c.ControlPlane != nil {
		v, err := c.ControlPlane(ctx)
		if err != nil {
			return err
		}
		cp, controlPlane = v, func(context.Context) (string, error) { return v, nil }
	}
	join, err := JoinMaterial(ctx, c.Secrets, nc, controlPlane)
	if err != nil {
		return err
	}
	if _, err := talosgen.Render(join, sampleNodeClaim(nc), Settings(nc), sampleReport(), talosgen.Network{}); err != nil {
		return err
	}
	if controlPlane == nil || join.Form() == talosgen.FormWorkerConfig {
		return nil
	}
	talos := nc.Spec.Image.TalosVersion
	if talos == "" && nc.Status.Image != nil {
		talos = nc.Status.Image.TalosVersion // from the manifest
	}
	return kubeversion.Check(talos, join.KubernetesVersion(), cp)
}

func sampleNodeClaim(nc *v1alpha1.ScalewayElasticMetalNodeClass) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "validation-node", Labels: map[string]string{
			karpv1.NodePoolLabelKey:        "validation",
			corev1.LabelInstanceTypeStable: "EM-VALIDATION",
			corev1.LabelTopologyZone:       "fr-par-2",
			karpv1.CapacityTypeLabelKey:    karpv1.CapacityTypeOnDemand,
		}},
		Spec:   karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Name: nc.Name}},
		Status: karpv1.NodeClaimStatus{ProviderID: "scaleway-em://fr-par-2/00000000-0000-0000-0000-000000000000"},
	}
}

func sampleReport() *report.Report {
	return &report.Report{
		Version: report.Version, Command: "write", OK: true,
		Disk: &report.Disk{Path: "/dev/nvme0n1", SizeBytes: 960e9, WWID: "eui.0000000000000001", Transport: "nvme", LogicalSectorSize: 512},
		// Two disks, so that every local-disk policy renders its volume documents.
		Disks: []report.Disk{
			{Path: "/dev/nvme0n1", SizeBytes: 960e9, WWID: "eui.0000000000000001", Transport: "nvme", LogicalSectorSize: 512},
			{Path: "/dev/nvme1n1", SizeBytes: 7680e9, WWID: "eui.0000000000000002", Transport: "nvme", LogicalSectorSize: 512},
		},
		NICs: []report.NIC{{Name: "eth0", MAC: "02:00:00:00:00:01", LinkUp: true, HasDefaultRoute: true}},
	}
}

// Register adds the controller to the manager. NodeClasses are reconciled on
// change and periodically (Secrets are not watched: see Secrets).
func (c *StatusController) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("nodeclass.status").
		For(&v1alpha1.ScalewayElasticMetalNodeClass{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}
