// Package operator wires the provider into Karpenter's operator: the API
// clients, the catalog, the install pipeline, the CloudProvider and the
// provider's own controllers.
package operator

import (
	"context"
	"fmt"
	"os"

	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/lifecycle"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	coreoperator "sigs.k8s.io/karpenter/pkg/operator"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/cloudprovider"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/garbagecollection"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagerbin"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator/options"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescuekey"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/talosapi"
)

// Run builds the operator and runs it until the process is stopped.
func Run() error {
	ctx, op := coreoperator.NewOperator()
	_ = v1alpha1.SchemeGroupVersion // registers the NodeClass types with the scheme
	opts := options.FromContext(ctx)
	logger := log.FromContext(ctx).WithName("scaleway-em")

	scwCfg, err := scaleway.ConfigFromEnv()
	if err != nil {
		return fmt.Errorf("scaleway settings: %w", err)
	}
	api, err := scaleway.New(scwCfg, scaleway.WithLogger(logger.WithName("api")), scaleway.WithRegisterer(crmetrics.Registry))
	if err != nil {
		return fmt.Errorf("scaleway client: %w", err)
	}
	imgCfg, err := imagesource.ConfigFromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("image bucket settings: %w", err)
	}
	images, err := imagesource.New(imgCfg)
	if err != nil {
		return fmt.Errorf("image source: %w", err)
	}
	cat := catalog.New(catalog.Options{
		Client:          api.SDK(),
		RefreshInterval: opts.CatalogRefresh,
		Logger:          logger.WithName("catalog"),
		Registerer:      crmetrics.Registry,
	})
	// The rescue key Secret is read and created directly: a cached client
	// would watch every Secret of the cluster.
	direct, err := client.New(op.GetConfig(), client.Options{Scheme: op.GetScheme()})
	if err != nil {
		return err
	}
	keys := &rescuekey.Store{
		Kube: direct, Namespace: opts.SystemNamespace, Name: opts.RescueKeySecret,
		KeyName: "karpenter-scaleway-em-" + opts.ClusterName, IAM: api,
	}
	timeouts := install.Timeouts{Delivery: opts.DeliveryTimeout, Rescue: opts.RescueTimeout, Imaging: opts.ImagingTimeout, Boot: opts.BootTimeout}
	installer := &install.Installer{
		API:    api,
		Poller: api.NewPoller(scaleway.Tag(scaleway.TagManagedBy, opts.ClusterName)),
		Dialer: &rescue.Dialer{User: opts.RescueSSHUser, Port: opts.RescueSSHPort, Signers: func() ([]ssh.Signer, error) {
			s, err := keys.Signer(context.Background())
			if err != nil {
				return nil, err
			}
			return []ssh.Signer{s}, nil
		}},
		Talos:         talosapi.Applier{Port: opts.TalosAPIPort},
		Imager:        imagerbin.Binary(),
		Timeouts:      timeouts,
		RetryInterval: opts.RetryInterval,
		Log:           logger.WithName("install"),
		Metrics:       install.NewMetrics(crmetrics.Registry),
	}
	if len(installer.Imager) == 0 {
		logger.Info("WARNING: this build has no embedded em-imager (build with `make build`); servers cannot be imaged")
	}
	// Create blocks through ordering, rescue and imaging: Karpenter must not
	// give up on a launch before the pipeline's own timeouts do.
	lifecycle.LaunchTimeout = timeouts.Total()

	cp := cloudprovider.New(op.GetClient(), direct, op.EventRecorder, cat, api, installer, images, keys, cloudprovider.Options{
		ClusterName: opts.ClusterName, DefaultZone: scwCfg.DefaultZone, ProjectID: scwCfg.ProjectID, IPv6Gateway: opts.IPv6Gateway,
	}, logger.WithName("cloudprovider"))
	decorated := overlay.Decorate(cp, op.GetClient(), op.InstanceTypeStore)
	clusterState := state.NewCluster(op.Clock, op.GetClient(), decorated)

	go cat.Start(ctx)
	op.
		WithControllers(ctx, controllers.NewControllers(ctx, op.Manager, op.Clock, op.GetClient(), op.EventRecorder,
			decorated, cp, clusterState, op.InstanceTypeStore)...).
		WithControllers(ctx,
			&nodeclass.StatusController{
				Kube: op.GetClient(), Secrets: direct, Images: images,
				Credentials: credentialsChecker{api: api, keys: keys, cluster: opts.ClusterName},
				DefaultZone: string(scwCfg.DefaultZone), Interval: opts.NodeClassRecheck,
			},
			&garbagecollection.Controller{
				Kube: op.GetClient(), API: api, ClusterName: opts.ClusterName, Zones: cp.ZonesInUse,
				GracePeriod: opts.GCGracePeriod, Interval: opts.GCInterval, Clock: op.Clock,
				Log: logger.WithName("garbagecollection"), Collected: garbagecollection.NewCollectedCounter(crmetrics.Registry),
			},
		).Start(ctx)
	return nil
}

// credentialsChecker proves the credentials by what the provider needs them
// for: registering the rescue key (IAM) and listing servers (Elastic Metal).
type credentialsChecker struct {
	api     *scaleway.Client
	keys    *rescuekey.Store
	cluster string
}

func (c credentialsChecker) CheckCredentials(ctx context.Context, zone scw.Zone) error {
	if _, err := c.keys.KeyIDs(ctx); err != nil {
		return err
	}
	_, err := c.api.ListServers(ctx, zone, []string{scaleway.Tag(scaleway.TagManagedBy, c.cluster)})
	return err
}
