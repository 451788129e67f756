package cloudprovider_test

// Tests on a light fixture: the CloudProvider built on the simulated
// Scaleway API and a fake cluster client, without a kube-apiserver, rescue
// hosts or an install controller. For the paths that end before an install
// starts (Create's order, Delete's release), in seconds.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	cp "github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/cloudprovider"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/eventlog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

const lightZone = scw.Zone("fr-par-2")

// lightOffer is a monthly amd64 offer in stock in the simulator's fr-par-2.
const lightOffer = "EM-B112X-SSD"

type light struct {
	t     *testing.T
	ctx   context.Context
	sim   *scwsim.Sim
	api   *scaleway.Client
	url   string
	kube  client.Client
	owner *identity.Owner
	cat   *catalog.Catalog
	nc    *v1alpha1.ScalewayElasticMetalNodeClass
	rec   *eventlog.Recorder
	p     *cp.CloudProvider
	// ncReadErr, when set, is what every read of a NodeClass fails with
	// (a timeout, a cancelled context): the NodeClass itself is still there.
	ncReadErr atomic.Pointer[error]
}

type noInstalls struct{}

func (noInstalls) Deleted(context.Context, *karpv1.NodeClaim) {}

type anyImage struct{}

func (anyImage) Resolve(context.Context, imagesource.Settings) (*imagesource.Image, error) {
	return &imagesource.Image{}, nil
}

// startLight starts the simulator (edits change its options) and builds the
// CloudProvider on it with a Ready NodeClass "nc" in lightZone that allows
// hourly and monthly billing; limits, when set, are the NodeClass's.
func startLight(t *testing.T, limits *v1alpha1.LimitsSpec, edits ...func(*scwsim.Options)) *light {
	t.Helper()
	l := &light{t: t, ctx: context.Background(), rec: &eventlog.Recorder{}}
	l.sim, l.api, l.url = simapi.StartURL(t, lightZone, edits...)
	l.nc = &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	l.nc.Spec.Zones = []string{string(lightZone)}
	l.nc.Spec.Billing.Periods = []string{"hourly", "monthly"}
	l.nc.Spec.Limits = limits
	for _, typ := range []string{v1alpha1.ConditionTypeCredentialsReady, v1alpha1.ConditionTypeProjectReady, v1alpha1.ConditionTypeImageReady,
		v1alpha1.ConditionTypeJoinConfigReady, v1alpha1.ConditionTypeInstallsHealthy} {
		l.nc.StatusConditions().SetTrue(typ)
	}
	l.kube = fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(l.nc).WithStatusSubresource(l.nc).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.ScalewayElasticMetalNodeClass); ok {
				if err := l.ncReadErr.Load(); err != nil {
					return *err
				}
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	l.p = l.build(l.api)
	return l
}

// build makes the CloudProvider on api; each call sets l.owner and l.cat.
func (l *light) build(api *scaleway.Client) *cp.CloudProvider {
	l.t.Helper()
	log := testlog.New(l.t)
	l.owner = &identity.Owner{Identity: identity.Identity{Name: "c1", ID: "uid-c1"}, API: api, Kube: l.kube, Log: log}
	inv := &inventory.Inventory{API: api, Kube: l.kube, Owner: l.owner, DefaultZone: string(lightZone), Log: log}
	l.cat = catalog.New(catalog.Options{Client: api.SDK(), Zones: []scw.Zone{lightZone}})
	if err := l.cat.Refresh(l.ctx); err != nil {
		l.t.Fatal(err)
	}
	keeper := &spare.Keeper{API: api, Offers: l.cat, Rescue: &rescue.Dialer{}, Owner: l.owner, Log: log}
	return cp.New(cp.Deps{Kube: l.kube, Recorder: l.rec, Catalog: l.cat, API: api, Inventory: inv, Spares: keeper,
		Installs: noInstalls{}, Images: anyImage{},
		Limits: &spendlimit.Limiter{Servers: inv.Servers, Offers: l.cat,
			OrderInFlight: func(tag string) bool { _, ok := api.OrderInFlight(tag); return ok }}},
		cp.Options{ClusterName: "c1", DefaultZone: string(lightZone)}, log)
}

// nextProcess is the CloudProvider of another controller process on the
// same API and cluster (the next leader, the controller after a restart):
// a new API client, nothing remembered.
func (l *light) nextProcess() *cp.CloudProvider {
	l.t.Helper()
	return l.build(simapi.NewClient(l.t, l.sim, l.url, lightZone))
}

// failNodeClassReads makes every read of a NodeClass fail with err (nil: read again).
func (l *light) failNodeClassReads(err error) {
	if err == nil {
		l.ncReadErr.Store(nil)
		return
	}
	l.ncReadErr.Store(&err)
}

// claim is a NodeClaim of NodeClass nc for lightOffer in lightZone, paid by billing.
func (l *light) claim(name string, billing catalog.BillingPeriod) *karpv1.NodeClaim {
	l.t.Helper()
	claim := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{karpv1.NodePoolLabelKey: "default"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: l.nc.Name},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
				{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
				{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{lightOffer}},
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{string(lightZone)}},
				{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{string(billing)}},
			},
		},
	}
	// Stored, as Karpenter's are: Create records on it that it orders.
	if err := l.kube.Create(l.ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
		l.t.Fatal(err)
	}
	return claim
}

// spare orders a monthly lightOffer server in lightZone tagged as a spare of
// NodeClass nc, and makes it old enough that every listing shows it.
func (l *light) spare() string {
	l.t.Helper()
	offer, ok := l.cat.Offer(string(lightZone), lightOffer, catalog.BillingMonthly)
	if !ok {
		l.t.Fatalf("no monthly %s in %s", lightOffer, lightZone)
	}
	tag := "test/spare=" + l.t.Name()
	srv, _, err := l.api.CreateServer(l.ctx, scaleway.CreateServerRequest{Zone: lightZone, OfferID: offer.ID, Name: "spare",
		Tags:           append(l.owner.Tags(), scaleway.Tag(scaleway.TagNodeClass, l.nc.Name), scaleway.Tag(scaleway.TagPhase, "spare"), tag),
		IdempotencyTag: tag})
	if err != nil {
		l.t.Fatal(err)
	}
	if err := l.sim.Age(srv.ID, 2*time.Hour); err != nil {
		l.t.Fatal(err)
	}
	return srv.ID
}

// serversOf are the simulator's servers tagged for NodeClaim claim.
func (l *light) serversOf(claim string) []scwsim.ServerState {
	var out []scwsim.ServerState
	for _, s := range l.sim.Servers() {
		if scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagNodeClaim, claim)) {
			out = append(out, s)
		}
	}
	return out
}

var errTimeout = apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 1)
