// Package options holds the provider's settings, registered with Karpenter's
// options injection so they parse like Karpenter core's: a flag each, with an
// environment variable as default. Credentials are not options: they come
// from the environment only (scaleway.ConfigFromEnv, imagesource.ConfigFromEnv),
// so they never appear in a process listing.
package options

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/utils/env"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/joinsecret"
)

func init() {
	coreoptions.Injectables = append(coreoptions.Injectables, &Options{})
}

type optionsKey struct{}

// Options of the provider.
type Options struct {
	ClusterName string
	// ClusterID is the cluster's identity; empty: the kube-system namespace's UID.
	ClusterID string
	// AdoptServersWithoutIdentity adopts every server tagged with
	// ClusterName and no identity (made before identities).
	AdoptServersWithoutIdentity bool
	SystemNamespace             string
	RescueSSHUser               string
	RescueSSHPort               int
	RescueKeySecret             string
	TalosAPIPort                int
	IPv6Gateway                 string
	DeliveryTimeout             time.Duration
	RescueTimeout               time.Duration
	ImagingTimeout              time.Duration
	BootTimeout                 time.Duration
	RetryInterval               time.Duration
	CatalogRefresh              time.Duration
	GCGracePeriod               time.Duration
	GCInterval                  time.Duration
	NodeClassRecheck            time.Duration
	RepairToleration            time.Duration
	// RescueBootRepairAfter: how long a kexec-booted node whose server boots into rescue may be Unknown before it is rebooted normal.
	RescueBootRepairAfter time.Duration
	// MaxConcurrentImaging bounds the images written at once.
	MaxConcurrentImaging int
	// ZoneSweepInterval between sweeps of every Elastic Metal zone for the cluster's servers.
	ZoneSweepInterval time.Duration

	// Install-failure breaker (package breaker) and the TTL of an offering whose hardware failed an install.
	BreakerThreshold  int
	BreakerWindow     time.Duration
	BreakerBackoff    time.Duration
	BreakerMaxBackoff time.Duration
	InstallFailedTTL  time.Duration

	// JoinSecretNamespaces is the comma-separated list of namespaces join
	// Secrets may be in; empty: SystemNamespace only (see JoinNamespaces).
	JoinSecretNamespaces string
}

// AddFlags implements Karpenter's options.Injectable.
func (o *Options) AddFlags(fs *coreoptions.FlagSet) {
	fs.StringVar(&o.ClusterName, "cluster-name", env.WithDefaultString("CLUSTER_NAME", ""), "[REQUIRED] Name of the cluster: scopes the servers this controller manages (tag karpenter.sh/managed-by).")
	fs.StringVar(&o.ClusterID, "cluster-id", env.WithDefaultString("CLUSTER_ID", ""), "Identity of the cluster (tag karpenter-scaleway-em/cluster-id), unique to it: it makes a server this cluster's (servers with this cluster's name and another identity are left alone; servers with this identity and a previous CLUSTER_NAME are kept and retagged). Empty: the kube-system namespace's UID. Set it on a cluster restored from another's etcd backup. A change while servers carry the previous identity (recorded in ConfigMap karpenter-scaleway-em-identity) is refused at start.")
	fs.BoolVarWithEnv(&o.AdoptServersWithoutIdentity, "adopt-servers-without-identity", "ADOPT_SERVERS_WITHOUT_IDENTITY", false, "Adopt every server tagged with this cluster's name and no identity (ordered before identities), even one no NodeClaim names (spares, leaks). Set it for one upgrade, on the cluster that ordered them only.")
	fs.StringVar(&o.SystemNamespace, "system-namespace", env.WithDefaultString("SYSTEM_NAMESPACE", "karpenter"), "Namespace of the controller (holds the rescue SSH key Secret).")
	fs.StringVar(&o.RescueSSHUser, "rescue-ssh-user", env.WithDefaultString("RESCUE_SSH_USER", "rescue"), "User to log into Scaleway's rescue system as when the API shows none for the boot (the API's rescue_server user, e.g. a per-server em-XXXXX, is used when shown), and once more when the rescue system refuses the key for the API's user.")
	fs.IntVar(&o.RescueSSHPort, "rescue-ssh-port", env.WithDefaultInt("RESCUE_SSH_PORT", 22), "SSH port of the rescue system.")
	fs.StringVar(&o.RescueKeySecret, "rescue-ssh-key-secret", env.WithDefaultString("RESCUE_SSH_KEY_SECRET", "karpenter-scaleway-em-rescue-ssh"), "Secret (in the system namespace) holding the controller's rescue SSH key; created if missing.")
	fs.StringVar(&o.JoinSecretNamespaces, "join-secret-namespaces", env.WithDefaultString("JOIN_SECRET_NAMESPACES", ""), "Comma-separated namespaces a NodeClass's join Secret may be in (the controller needs get on Secrets there); empty: the system namespace only.")
	fs.IntVar(&o.TalosAPIPort, "talos-api-port", env.WithDefaultInt("TALOS_API_PORT", 50000), "Port of the Talos API.")
	fs.StringVar(&o.IPv6Gateway, "ipv6-gateway", env.WithDefaultString("IPV6_GATEWAY", ""), "IPv6 gateway for the nodes' static /128; empty leaves IPv6 routing to router advertisements.")
	fs.DurationVar(&o.DeliveryTimeout, "delivery-timeout", env.WithDefaultDuration("DELIVERY_TIMEOUT", 30*time.Minute), "How long an ordered server may take to be delivered.")
	fs.DurationVar(&o.RescueTimeout, "rescue-timeout", env.WithDefaultDuration("RESCUE_TIMEOUT", 15*time.Minute), "How long the reboot into rescue and its SSH may take.")
	fs.DurationVar(&o.ImagingTimeout, "imaging-timeout", env.WithDefaultDuration("IMAGING_TIMEOUT", 20*time.Minute), "How long em-imager may take.")
	fs.DurationVar(&o.BootTimeout, "boot-timeout", env.WithDefaultDuration("BOOT_TIMEOUT", 15*time.Minute), "How long the reboot into Talos and the config apply may take.")
	fs.DurationVar(&o.RetryInterval, "install-retry-interval", env.WithDefaultDuration("INSTALL_RETRY_INTERVAL", 5*time.Second), "Interval between SSH/Talos API connection attempts.")
	fs.DurationVar(&o.CatalogRefresh, "catalog-refresh-interval", env.WithDefaultDuration("CATALOG_REFRESH_INTERVAL", 5*time.Minute), "Interval between refreshes of the offer catalogue (stock, prices).")
	fs.DurationVar(&o.GCGracePeriod, "gc-grace-period", env.WithDefaultDuration("GC_GRACE_PERIOD", DefaultGCGracePeriod), "Time since a server last changed hands (its order, or the take of a spare) under which it is never released for want of a NodeClaim (covers an order in flight); at least 30s.")
	fs.DurationVar(&o.GCInterval, "gc-interval", env.WithDefaultDuration("GC_INTERVAL", DefaultGCInterval), "Interval between garbage collection sweeps.")
	fs.DurationVar(&o.RepairToleration, "repair-toleration", env.WithDefaultDuration("REPAIR_TOLERATION", 20*time.Minute), "How long a node may be NotReady/Unknown before Karpenter's node repair (feature gate NodeRepair) replaces it.")
	fs.DurationVar(&o.RescueBootRepairAfter, "rescue-boot-repair-after", env.WithDefaultDuration("RESCUE_BOOT_REPAIR_AFTER", 2*time.Minute), "How long a node that booted by kexec may have its Ready condition Unknown (the kubelet stopped posting) while Scaleway still shows its server's boot type rescue (a firmware reboot landed in rescue) before the controller reboots it with boot type normal (at most once per server per 30 minutes).")
	fs.IntVar(&o.MaxConcurrentImaging, "max-concurrent-imaging", env.WithDefaultInt("MAX_CONCURRENT_IMAGING", 8), "Images written at once (each holds an SSH session and uploads em-imager); further installs wait their turn within their phase timeout.")
	fs.DurationVar(&o.ZoneSweepInterval, "zone-sweep-interval", env.WithDefaultDuration("ZONE_SWEEP_INTERVAL", 10*time.Minute), "Interval between sweeps of every Elastic Metal zone for this cluster's servers (a zone removed from a NodeClass keeps its servers found and collected).")
	fs.IntVar(&o.BreakerThreshold, "install-breaker-threshold", env.WithDefaultInt("INSTALL_BREAKER_THRESHOLD", 2), "Consecutive install failures of a NodeClass (within --install-breaker-window) that stop orders for it (NodeClass condition InstallsHealthy=False).")
	fs.DurationVar(&o.BreakerWindow, "install-breaker-window", env.WithDefaultDuration("INSTALL_BREAKER_WINDOW", time.Hour), "Window in which a NodeClass's consecutive install failures are counted.")
	fs.DurationVar(&o.BreakerBackoff, "install-breaker-backoff", env.WithDefaultDuration("INSTALL_BREAKER_BACKOFF", 30*time.Minute), "Time without orders after the breaker opens, before one probe order; doubled after each failed probe.")
	fs.DurationVar(&o.BreakerMaxBackoff, "install-breaker-max-backoff", env.WithDefaultDuration("INSTALL_BREAKER_MAX_BACKOFF", 8*time.Hour), "Longest time between probe orders of a NodeClass whose installs keep failing.")
	fs.DurationVar(&o.InstallFailedTTL, "install-failed-offering-ttl", env.WithDefaultDuration("INSTALL_FAILED_OFFERING_TTL", time.Hour), "How long an offering whose hardware failed an install (no disk matches, disk too small, with rescue.disk auto) is hidden from Karpenter.")
	fs.DurationVar(&o.NodeClassRecheck, "nodeclass-recheck-interval", env.WithDefaultDuration("NODECLASS_RECHECK_INTERVAL", 5*time.Minute), "Interval between checks of a Ready NodeClass (credentials, image manifest, join Secret).")
}

// Parse implements options.Injectable.
func (o *Options) Parse(fs *coreoptions.FlagSet, args ...string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		return fmt.Errorf("parsing flags, %w", err)
	}
	return errors.Join(CheckEnv(fs.FlagSet, os.LookupEnv), o.Validate())
}

// The defaults of GC_GRACE_PERIOD and GC_INTERVAL, which a money check
// over a controller run without them must assume too.
const (
	DefaultGCGracePeriod = 10 * time.Minute
	DefaultGCInterval    = 2 * time.Minute
)

// MinGCGracePeriod is the floor of GC_GRACE_PERIOD: a server younger than
// the grace period may be an order whose NodeClaim the controller's cache
// or the API's eventually consistent listing does not show yet.
const MinGCGracePeriod = 30 * time.Second

// EnvName is the environment variable that sets a flag's default, by the
// convention every flag of Karpenter core and of the provider follows
// (--gc-grace-period: GC_GRACE_PERIOD).
func EnvName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// CheckEnv refuses an environment variable that sets a flag's default but
// does not parse as the flag's type: Karpenter's env helpers would silently
// keep the default (DELIVERY_TIMEOUT=30, without a unit, would mean 30m).
func CheckEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			// Karpenter's BoolVarWithEnv flags have no Getter.
			if _, err := strconv.ParseBool(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q is not a valid bool (flag --%s)", name, v, f.Name))
			}
			return
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		var err error
		switch g.Get().(type) {
		case time.Duration:
			_, err = time.ParseDuration(v)
		case int, int64:
			_, err = strconv.ParseInt(v, 10, 64)
		case float64:
			_, err = strconv.ParseFloat(v, 64)
		case bool:
			_, err = strconv.ParseBool(v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a valid %T (flag --%s)", name, v, g.Get(), f.Name))
		}
	})
	return errors.Join(errs...)
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.ClusterName == "" {
		errs = append(errs, errors.New("CLUSTER_NAME (--cluster-name) is required"))
	}
	errs = append(errs, o.rangeErrors()...)
	if o.BreakerMaxBackoff < o.BreakerBackoff {
		errs = append(errs, fmt.Errorf("INSTALL_BREAKER_MAX_BACKOFF %s is below INSTALL_BREAKER_BACKOFF %s", o.BreakerMaxBackoff, o.BreakerBackoff))
	}
	if o.GCGracePeriod < MinGCGracePeriod {
		errs = append(errs, fmt.Errorf("GC_GRACE_PERIOD (--gc-grace-period) %s is below the floor of %s: a younger server may be an order whose NodeClaim is not visible yet, and must never be released", o.GCGracePeriod, MinGCGracePeriod))
	}
	if err := identity.Validate(o.ClusterID); err != nil {
		errs = append(errs, fmt.Errorf("CLUSTER_ID (--cluster-id): %w", err))
	}
	if _, err := joinsecret.ParseNamespaces(o.JoinSecretNamespaces); err != nil {
		errs = append(errs, fmt.Errorf("JOIN_SECRET_NAMESPACES: %w", err))
	}
	return errors.Join(errs...)
}

// rangeErrors checks the settings that only need to be in range: ports,
// counts and durations that must be positive.
func (o *Options) rangeErrors() []error {
	var errs []error
	for name, p := range map[string]int{"RESCUE_SSH_PORT": o.RescueSSHPort, "TALOS_API_PORT": o.TalosAPIPort} {
		if p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s: %d is not a port", name, p))
		}
	}
	if o.MaxConcurrentImaging <= 0 {
		errs = append(errs, fmt.Errorf("MAX_CONCURRENT_IMAGING: %d must be positive", o.MaxConcurrentImaging))
	}
	for name, d := range map[string]time.Duration{"DELIVERY_TIMEOUT": o.DeliveryTimeout, "RESCUE_TIMEOUT": o.RescueTimeout,
		"IMAGING_TIMEOUT": o.ImagingTimeout, "BOOT_TIMEOUT": o.BootTimeout, "INSTALL_RETRY_INTERVAL": o.RetryInterval,
		"CATALOG_REFRESH_INTERVAL": o.CatalogRefresh, "GC_INTERVAL": o.GCInterval, "NODECLASS_RECHECK_INTERVAL": o.NodeClassRecheck,
		"REPAIR_TOLERATION": o.RepairToleration, "ZONE_SWEEP_INTERVAL": o.ZoneSweepInterval, "RESCUE_BOOT_REPAIR_AFTER": o.RescueBootRepairAfter,
		"INSTALL_BREAKER_WINDOW": o.BreakerWindow, "INSTALL_BREAKER_BACKOFF": o.BreakerBackoff,
		"INSTALL_BREAKER_MAX_BACKOFF": o.BreakerMaxBackoff, "INSTALL_FAILED_OFFERING_TTL": o.InstallFailedTTL} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if o.BreakerThreshold <= 0 {
		errs = append(errs, fmt.Errorf("INSTALL_BREAKER_THRESHOLD: %d must be positive", o.BreakerThreshold))
	}
	return errs
}

// JoinNamespaces are the namespaces join Secrets may be in: the listed ones,
// or the system namespace when none is listed.
func (o *Options) JoinNamespaces() []string {
	ns, err := joinsecret.ParseNamespaces(o.JoinSecretNamespaces)
	if err != nil || len(ns) == 0 {
		return []string{o.SystemNamespace}
	}
	return ns
}

// ToContext implements options.Injectable.
func (o *Options) ToContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, optionsKey{}, o)
}

// FromContext returns the options injected in ctx.
func FromContext(ctx context.Context) *Options {
	v := ctx.Value(optionsKey{})
	if v == nil {
		return nil
	}
	return v.(*Options)
}
