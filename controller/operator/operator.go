// Package operator wires the provider into Karpenter's operator: the API
// clients, the catalog, the install pipeline, the CloudProvider and the
// provider's own controllers.
package operator

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/lifecycle"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	coreoperator "sigs.k8s.io/karpenter/pkg/operator"
	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/billing"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/bootstraptoken"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/breaker"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/capacity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/cloudprovider"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/garbagecollection"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagerbin"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/joinsecret"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/kubeversion"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/leaderfence"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeinstall"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator/options"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/preimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/registration"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/removal"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescueboot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescuekey"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/reservation"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/serverphases"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spend"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/talosapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/warmpool"
)

// Run builds the operator and runs it until the process is stopped.
func Run() error {
	ctx, op := coreoperator.NewOperator()
	opts := options.FromContext(ctx)
	// The rescue key and join Secrets are read directly: a cached client
	// would watch every Secret of the cluster.
	direct, err := client.New(op.GetConfig(), client.Options{Scheme: op.GetScheme()})
	if err != nil {
		return err
	}
	logger := log.FromContext(ctx).WithName("scaleway-em")
	var apiOpts []scaleway.Option
	if !coreoptions.FromContext(ctx).DisableLeaderElection {
		// Leader election does not fence a leader that froze past its
		// Lease: it would go on writing beside the next one until its
		// renew deadline. This process exits instead, writing nothing.
		fence := leaderfence.New(leaderfence.MaxStall, func(stalled time.Duration) {
			logger.Info("this process stalled longer than its leader Lease allows; another replica may lead: exiting without writing anything more to Scaleway", "stalled", stalled.String())
			os.Exit(1)
		})
		go fence.Run(ctx, 500*time.Millisecond)
		apiOpts = append(apiOpts, scaleway.WithTransport(fence.Transport(http.DefaultTransport.(*http.Transport).Clone())))
	}
	p, err := NewProvider(ctx, opts, os.Getenv, op.GetClient(), direct, op.EventRecorder, crmetrics.Registry, logger, apiOpts...)
	if err != nil {
		return err
	}
	controlPlane, err := kubeversion.FromConfig(op.GetConfig())
	if err != nil {
		return err
	}
	p.SetControlPlane(controlPlane)
	// Create returns once the server is ordered; what may keep it failing
	// longer is an order whose answer was lost, which is looked for during
	// the settle window before any new order: Karpenter must not give up on
	// the NodeClaim (and its possible server) before that.
	lifecycle.LaunchTimeout = max(lifecycle.LaunchTimeout, p.API.Config().OrderSettle+5*time.Minute)
	// Spares are offered as reserved capacity only with Karpenter's
	// ReservedCapacity feature gate (on by default): without it, its
	// scheduler would not count reservations.
	if !coreoptions.FromContext(ctx).FeatureGates.ReservedCapacity {
		p.CloudProvider.Reservations = nil
	}

	decorated := overlay.Decorate(p.CloudProvider, op.GetClient(), op.InstanceTypeStore)
	clusterState := state.NewCluster(op.Clock, op.GetClient(), decorated)
	go p.Catalog.Start(ctx)
	op.
		WithControllers(ctx, controllers.NewControllers(ctx, op.Manager, op.Clock, op.GetClient(), op.EventRecorder,
			decorated, p.CloudProvider, clusterState, op.InstanceTypeStore)...).
		WithControllers(ctx, p.NodeClassStatus, p.GarbageCollection, p.Installs, p.Spend, p.Removal, p.WarmPool, p.PreImage, p.Billing, p.RescueBoot,
			&capacity.Controller{Kube: op.GetClient(), Catalog: p.Catalog, Interval: opts.CatalogRefresh}).
		Start(ctx)
	return nil
}

// Provider is the provider's part of the operator, built from the options
// and the environment (credentials).
type Provider struct {
	API               *scaleway.Client
	Catalog           *catalog.Catalog
	Images            *imagesource.Source
	RescueKeys        *rescuekey.Store
	Installer         *install.Installer
	Inventory         *inventory.Inventory
	Spares            *spare.Keeper
	Installs          *nodeinstall.Controller
	CloudProvider     *cloudprovider.CloudProvider
	NodeClassStatus   *nodeclass.StatusController
	GarbageCollection *garbagecollection.Controller
	Spend             *spend.Controller
	Removal           *removal.Controller
	WarmPool          *warmpool.Controller
	PreImage          *preimage.Controller
	Billing           *billing.Backfill
	RescueBoot        *rescueboot.Controller
}

// SetControlPlane makes the kubelet version of a join Secret that names none
// the API server's, and checks every NodeClass's kubelet against it.
func (p *Provider) SetControlPlane(cp kubeversion.ControlPlane) {
	p.NodeClassStatus.ControlPlane = cp
	p.Installs.Config.ControlPlane = cp
}

// NewProvider builds the provider. kube may be cached; direct must not be
// (it reads Secrets). Credentials come from the environment; apiOpts are
// added to the Scaleway client's.
func NewProvider(ctx context.Context, opts *options.Options, getenv func(string) string, kube, direct client.Client, recorder events.Recorder,
	reg prometheus.Registerer, logger logr.Logger, apiOpts ...scaleway.Option) (*Provider, error) {
	_ = v1alpha1.SchemeGroupVersion // registers the NodeClass types with the scheme
	scwCfg, err := scaleway.ConfigFromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("scaleway settings: %w", err)
	}
	api, err := scaleway.New(scwCfg, append([]scaleway.Option{scaleway.WithLogger(logger.WithName("api")), scaleway.WithRegisterer(reg)}, apiOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("scaleway client: %w", err)
	}
	imgCfg, err := imagesource.ConfigFromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("image bucket settings: %w", err)
	}
	images, err := imagesource.New(imgCfg)
	if err != nil {
		return nil, fmt.Errorf("image source: %w", err)
	}
	cat := catalog.New(catalog.Options{
		Client:           api.SDK(),
		RefreshInterval:  opts.CatalogRefresh,
		InstallFailedTTL: opts.InstallFailedTTL,
		Logger:           logger.WithName("catalog"),
		Registerer:       reg,
	})
	keys := &rescuekey.Store{
		Kube: direct, Namespace: opts.SystemNamespace, Name: opts.RescueKeySecret,
		KeyName: "karpenter-scaleway-em-" + opts.ClusterName, IAM: api,
	}
	// NodeClasses name join Secrets: read them only where the operator allows.
	joinSecrets := joinsecret.Reader{Reader: direct, Scope: joinsecret.Scope{
		Namespaces: opts.JoinNamespaces(),
		Reserved:   []types.NamespacedName{{Namespace: opts.SystemNamespace, Name: opts.RescueKeySecret}},
	}}
	dialer := &rescue.Dialer{User: opts.RescueSSHUser, Port: opts.RescueSSHPort, Signers: func() ([]ssh.Signer, error) {
		s, err := keys.Signer(context.Background())
		if err != nil {
			return nil, err
		}
		return []ssh.Signer{s}, nil
	}}
	installer := &install.Installer{
		API:           api,
		Poller:        api.NewPoller(scaleway.Tag(scaleway.TagManagedBy, opts.ClusterName)),
		Dialer:        dialer,
		Talos:         talosapi.Applier{Port: opts.TalosAPIPort},
		Keys:          keys,
		Imager:        imagerbin.Binary(),
		Timeouts:      install.Timeouts{Delivery: opts.DeliveryTimeout, Rescue: opts.RescueTimeout, Imaging: opts.ImagingTimeout, Boot: opts.BootTimeout},
		RetryInterval: opts.RetryInterval,
		ImagingSlots:  opts.MaxConcurrentImaging,
		Log:           logger.WithName("install"),
		Metrics:       install.NewMetrics(reg),
	}
	if len(installer.Imager) == 0 {
		logger.Info("WARNING: this build has no embedded em-imager (build with `make build`); servers cannot be imaged")
	}
	zones := make([]string, 0, len(snapshot.Zones))
	for _, z := range snapshot.Zones {
		zones = append(zones, string(z))
	}
	clusterID, err := identity.Resolve(ctx, direct, opts.ClusterID)
	if err != nil {
		return nil, err
	}
	logger.Info("cluster identity", "name", opts.ClusterName, "identity", clusterID)
	owner := &identity.Owner{Identity: identity.Identity{Name: opts.ClusterName, ID: clusterID}, API: api, Kube: kube,
		AdoptAll: opts.AdoptServersWithoutIdentity, Log: logger.WithName("identity"), Metrics: identity.NewMetrics(reg)}
	// Before anything lists servers: a changed CLUSTER_ID while servers
	// carry the previous one is refused, and servers ordered under a
	// previous clusterName are retagged with this one.
	if err := owner.Start(ctx, direct, opts.SystemNamespace, zones); err != nil {
		return nil, err
	}
	inv := &inventory.Inventory{API: api, Kube: kube, Owner: owner, DefaultZone: string(scwCfg.DefaultZone),
		AllZones: zones, SweepInterval: opts.ZoneSweepInterval, Log: logger.WithName("inventory")}
	reservations := &reservation.Cache{API: api, Owner: owner, Offers: cat, ManagedBy: opts.ClusterName,
		Log: logger.WithName("reservation")}
	// Nodes uncached: a spare's stale Node registered moments ago must be seen.
	spares := &spare.Keeper{API: api, Offers: cat, Rescue: dialer, Owner: owner, Nodes: direct,
		Log: logger.WithName("spare"), Changed: reservations.Invalidate}
	// Read and written directly: the garbage collector must see a record
	// the finalizer wrote moments ago.
	removals := &removal.Records{Kube: direct, Namespace: opts.SystemNamespace}
	// Create only: the token's expiration ends it (install.Timeouts.TokenTTL).
	tokens := &bootstraptoken.Manager{Kube: direct, Namespace: "kube-system", TTL: installer.Timeouts.TokenTTL()}
	// Direct reads: a status written on a stale cached copy would conflict.
	breakers := &breaker.Store{Kube: direct, Secrets: joinSecrets, Offerings: cat, Recorder: recorder, Metrics: breaker.NewMetrics(reg),
		Policy: breaker.Policy{Threshold: int32(opts.BreakerThreshold), Window: opts.BreakerWindow,
			Backoff: opts.BreakerBackoff, MaxBackoff: opts.BreakerMaxBackoff}}
	installs := &nodeinstall.Controller{
		Kube: kube, API: api, Installer: installer, Spares: spares, Offerings: cat, Images: images,
		Window:   &registration.Window{Kube: kube},
		Config:   &nodeinstall.Configs{Secrets: joinSecrets, API: api, IPv6Gateway: opts.IPv6Gateway, Tokens: tokens},
		Recorder: recorder, Log: logger.WithName("nodeinstall"), Metrics: nodeinstall.NewMetrics(reg),
		Breaker: breakers,
	}
	// One limiter for Create and the warm pool: one count of orders not listed yet.
	limits := &spendlimit.Limiter{Servers: inv.Servers, Offers: cat, Metrics: spendlimit.NewMetrics(reg, kube),
		OrderInFlight: func(tag string) bool { _, ok := api.OrderInFlight(tag); return ok }}
	cp := cloudprovider.New(cloudprovider.Deps{
		Kube: kube, Recorder: recorder, Catalog: cat, API: api, Inventory: inv, Spares: spares, Installs: installs,
		Images: images, Breaker: breakers, Limits: limits, Reservations: reservations,
	}, cloudprovider.Options{
		ClusterName: opts.ClusterName, DefaultZone: string(scwCfg.DefaultZone), RepairToleration: opts.RepairToleration,
	}, logger.WithName("cloudprovider"))
	pool := &warmpool.Controller{Kube: kube, API: api, Catalog: cat, Servers: inv.Servers, Saw: inv.Saw,
		Spares: spares, Breaker: breakers, Limits: limits, DefaultZone: string(scwCfg.DefaultZone),
		Recorder: recorder, Metrics: warmpool.NewMetrics(reg), Log: logger.WithName("warmpool")}
	// The slots another process recorded before ordering count against the
	// spend limits too (the NodeClaims' records are added by cloudprovider.New).
	limits.Records = append(limits.Records, pool.Records)
	return &Provider{
		API: api, Catalog: cat, Images: images, RescueKeys: keys, Installer: installer, Inventory: inv, Spares: spares,
		Installs: installs, CloudProvider: cp,
		NodeClassStatus: &nodeclass.StatusController{
			Kube: kube, Secrets: joinSecrets, Images: images,
			Credentials: credentialsChecker{api: api, keys: keys, cluster: opts.ClusterName},
			DefaultZone: string(scwCfg.DefaultZone), ProjectID: scwCfg.ProjectID, Interval: opts.NodeClassRecheck,
			Recorder: recorder, Installs: breakers, LeftAlone: owner.LeftAlone,
		},
		GarbageCollection: &garbagecollection.Controller{
			// NodeClaims uncached: one created moments ago may own a server already.
			Kube: kube, Reader: direct, Servers: inv.List, Spares: spares,
			GracePeriod: opts.GCGracePeriod, Interval: opts.GCInterval,
			Log: logger.WithName("garbagecollection"), Collected: garbagecollection.NewCollectedCounter(reg),
			Unlisted: garbagecollection.NewUnlistedCounter(reg), KeptOnDeletion: removals.Kept,
			RescueKeys: keys,
		},
		// Every GC interval: the same listing cadence, so the gauges lag
		// the servers by no more than a GC sweep does.
		Spend: &spend.Controller{Servers: inv.Servers, Offers: cat,
			Interval: opts.GCInterval, Gauges: spend.NewGauges(reg), Listed: serverphases.NewGauge(reg, cat).Update},
		Removal: &removal.Controller{Kube: kube, Servers: inv.Servers, Spares: spares, Records: removals, Recorder: recorder,
			Log: logger.WithName("removal")},
		WarmPool: pool,
		// Every GC interval until servers ordered before billing tags have
		// them (the catalogue's first refresh settles them), then hourly.
		Billing: &billing.Backfill{Servers: inv.Servers, API: api, Offers: cat, Interval: opts.GCInterval,
			Log: logger.WithName("billing")},
		// Every GC interval: a spare kept by a sweep is imaged by the next.
		PreImage: &preimage.Controller{Kube: kube, API: api, Servers: inv.Servers, Spares: spares, Imager: installer,
			Images: images, Interval: opts.GCInterval, Log: logger.WithName("preimage"), Metrics: preimage.NewMetrics(reg)},
		// Every GC interval: a kexec-booted node a firmware reboot took to
		// rescue is rebooted normal once NotReady long enough.
		RescueBoot: &rescueboot.Controller{Kube: kube, API: api, Servers: inv.Servers, Recorder: recorder,
			Interval: opts.GCInterval, NotReadyFor: opts.RescueBootRepairAfter,
			Log: logger.WithName("rescueboot"), Repairs: rescueboot.NewRepairsCounter(reg)},
	}, nil
}

// credentialsChecker proves the credentials by what the provider needs them
// for, registering nothing: reading the project's IAM SSH keys and listing
// servers (Elastic Metal).
type credentialsChecker struct {
	api     *scaleway.Client
	keys    *rescuekey.Store
	cluster string
}

func (c credentialsChecker) CheckCredentials(ctx context.Context, zones []scw.Zone) error {
	// IAM is project-wide: one listing of its keys, not one per zone.
	if err := c.keys.Check(ctx); err != nil {
		return err
	}
	for _, z := range zones {
		if _, err := c.api.ListServers(ctx, z, []string{scaleway.Tag(scaleway.TagManagedBy, c.cluster)}); err != nil {
			return fmt.Errorf("zone %s: %w", z, err)
		}
	}
	return nil
}
