package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/helmrender"
)

// helmMain plays the helm commands the docs use (Helm is not installed
// here), with Helm's Go SDK and this project's renderer:
//
//	helm [--kubeconfig K] upgrade [--install] NAME CHART -n NS [--version V] [--create-namespace] [-f FILE]... [--set K=V]... [--skip-crds]
//	helm [--kubeconfig K] uninstall NAME -n NS
//	helm push ARCHIVE oci://REGISTRY/PATH
//
// CHART is a chart directory or oci://REGISTRY/PATH/NAME: upgrade finds it
// as helm does (Helm's own ChartPathOptions.LocateChart and registry
// client, so a wrong name or --version fails as it would for a reader), and
// push is Helm's push action. Both reach the registry as helm v3 does, over
// HTTPS with a fallback to plain HTTP. upgrade merges the values as helm does (-f files in order, then --set),
// renders the chart with test/chart/helmrender (values.schema.json and the
// chart's kubeVersion checked against the API server's version), creates
// the chart's crds/ that do not exist yet (unless --skip-crds), and applies
// every object server side, as Helm would create or patch them; it keeps
// the list of what it applied in $HELM_STANDIN_STATE for uninstall, which
// deletes it. No release history, hooks or ownership checks. Any other
// command fails, naming itself.
func helmMain(args []string, stderr io.Writer) int {
	if err := runHelm(context.Background(), args); err != nil {
		fmt.Fprintf(stderr, "helm (test stand-in, test/docs/helm_test.go): %v\n", err)
		return 1
	}
	return 0
}

// helmArgs are a helm command line's parts.
type helmArgs struct {
	kubeconfig, namespace     string
	version                   string
	pos, valueFiles, sets     []string
	createNamespace, skipCRDs bool
}

func parseHelm(args []string) (helmArgs, error) {
	var a helmArgs
	next := func(i *int) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("%s needs a value", args[*i])
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		var err error
		switch args[i] {
		case "--kubeconfig":
			a.kubeconfig, err = next(&i)
		case "-n", "--namespace":
			a.namespace, err = next(&i)
		case "-f", "--values":
			var v string
			v, err = next(&i)
			a.valueFiles = append(a.valueFiles, v)
		case "--set":
			var v string
			v, err = next(&i)
			a.sets = append(a.sets, v)
		case "--version":
			a.version, err = next(&i)
		case "--create-namespace":
			a.createNamespace = true
		case "--skip-crds":
			a.skipCRDs = true
		case "--install":
		default:
			if strings.HasPrefix(args[i], "-") {
				return a, fmt.Errorf("flag %s is not mapped", args[i])
			}
			a.pos = append(a.pos, args[i])
		}
		if err != nil {
			return a, err
		}
	}
	if a.namespace == "" {
		a.namespace = "default"
	}
	return a, nil
}

// helmClients reach the API server of the kubeconfig (--kubeconfig, else
// $KUBECONFIG).
type helmClients struct {
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	mapper  meta.RESTMapper
	version string
}

func newHelmClients(kubeconfig string) (*helmClients, error) {
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return nil, err
	}
	return &helmClients{kube: kube, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), version: v.GitVersion}, nil
}

func runHelm(ctx context.Context, args []string) error {
	a, err := parseHelm(args)
	if err != nil {
		return err
	}
	if len(a.pos) == 0 {
		return errors.New("no command")
	}
	if a.pos[0] == "push" && len(a.pos) == 3 {
		return pushChart(a.pos[1], a.pos[2])
	}
	c, err := newHelmClients(a.kubeconfig)
	if err != nil {
		return err
	}
	switch {
	case a.pos[0] == "upgrade" && len(a.pos) == 3:
		return c.upgrade(ctx, a)
	case a.pos[0] == "uninstall" && len(a.pos) == 2:
		return c.uninstall(ctx, a.pos[1], a.namespace)
	}
	return fmt.Errorf("%q is not mapped", strings.Join(args, " "))
}

func (c *helmClients) upgrade(ctx context.Context, a helmArgs) error {
	name := a.pos[1]
	chart, err := locateChart(a.pos[2], a.version)
	if err != nil {
		return err
	}
	vals, err := mergeValues(a.valueFiles, a.sets)
	if err != nil {
		return err
	}
	valuesYAML, err := yaml.Marshal(vals)
	if err != nil {
		return err
	}
	objs, err := helmrender.Render(chart, valuesYAML, helmrender.Release{Name: name, Namespace: a.namespace, KubeVersion: c.version})
	if err != nil {
		return err
	}
	if _, err := c.kube.CoreV1().Namespaces().Get(ctx, a.namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) && a.createNamespace {
		if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.namespace}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("namespace %s: %w", a.namespace, err)
	}
	if !a.skipCRDs {
		if err := c.createCRDs(ctx, chart.CRDObjects()); err != nil {
			return err
		}
	}
	var applied []objectRef
	for _, o := range objs {
		ref, err := c.apply(ctx, o, a.namespace)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		applied = append(applied, ref)
	}
	return saveRelease(name, a.namespace, applied)
}

// registryClient is Helm's OCI registry client as the helm command makes
// it: credentials from helm's and docker's files under $HOME.
func registryClient() (*registry.Client, error) {
	return registry.NewClient(registry.ClientOptWriter(io.Discard))
}

// locateChart loads the chart an upgrade names: a directory, or an oci://
// reference pulled at version. It does what helm install and upgrade do
// (pkg/action's LocateChart, whose downloader and getter packages need
// modules this one does not build with) with the registry client they use:
// the reference and --version checked against each other, the tag resolved,
// the chart layer pulled.
func locateChart(ref, version string) (*helmchart.Chart, error) {
	if !registry.IsOCI(ref) {
		return loader.Load(ref)
	}
	rc, err := registryClient()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(ref)
	if err != nil {
		return nil, err
	}
	resolved, err := rc.ValidateReference(ref, version, u)
	if err != nil {
		return nil, fmt.Errorf("chart %s (version %q): %w", ref, version, err)
	}
	// The resolved URL's path is the repository without its leading
	// slash: String puts it back, as Helm's OCI getter reads it.
	pulled, err := rc.Pull(strings.TrimPrefix(resolved.String(), registry.OCIScheme+"://"))
	if err != nil {
		return nil, fmt.Errorf("chart %s (version %q): %w", ref, version, err)
	}
	return loader.LoadArchive(bytes.NewReader(pulled.Chart.Data))
}

// pushChart is helm push (pkg/pusher's OCI pusher, whose package needs the
// same missing modules): the archive goes to <remote>/<chart name>, tagged
// with the chart's version, in strict mode (the reference must match the
// chart's name and version).
func pushChart(archive, remote string) error {
	if !registry.IsOCI(remote) {
		return fmt.Errorf("push to %s: only oci:// is mapped", remote)
	}
	c, err := loader.Load(archive)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		return err
	}
	rc, err := registryClient()
	if err != nil {
		return err
	}
	ref := fmt.Sprintf("%s:%s", path.Join(strings.TrimPrefix(remote, registry.OCIScheme+"://"), c.Name()), c.Metadata.Version)
	_, err = rc.Push(data, ref, registry.PushOptStrictMode(true))
	return err
}

// mergeValues is helm's order: each -f file over the previous ones (maps
// merged key by key, anything else replaced), then each --set.
func mergeValues(files, sets []string) (map[string]any, error) {
	base := map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		cur := map[string]any{}
		if err := yaml.Unmarshal(data, &cur); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		base = mergeMaps(base, cur)
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, base); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return base, nil
}

func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// createCRDs creates the chart's crds/ that do not exist, as Helm does at
// install (it never updates them).
func (c *helmClients) createCRDs(ctx context.Context, crds []helmchart.CRD) error {
	for _, crd := range crds {
		objs, err := helmrender.Objects(crd.File.Data)
		if err != nil {
			return fmt.Errorf("%s: %w", crd.Filename, err)
		}
		for _, o := range objs {
			gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
			_, err := c.dyn.Resource(gvr).Create(ctx, o, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s: %w", crd.Filename, err)
			}
		}
	}
	return nil
}

// objectRef names one applied object for uninstall.
type objectRef struct {
	Group, Version, Resource, Namespace, Name string
}

func (c *helmClients) apply(ctx context.Context, o *unstructured.Unstructured, namespace string) (objectRef, error) {
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return objectRef{}, err
	}
	ref := objectRef{Group: m.Resource.Group, Version: m.Resource.Version, Resource: m.Resource.Resource, Name: o.GetName()}
	var ri dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			o.SetNamespace(namespace)
		}
		ref.Namespace = o.GetNamespace()
		ri = c.dyn.Resource(m.Resource).Namespace(ref.Namespace)
	}
	data, err := json.Marshal(o)
	if err != nil {
		return ref, err
	}
	force := true
	_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "helm", Force: &force})
	return ref, err
}

func (c *helmClients) uninstall(ctx context.Context, name, namespace string) error {
	refs, err := loadRelease(name, namespace)
	if err != nil {
		return err
	}
	for _, r := range refs {
		var ri dynamic.ResourceInterface = c.dyn.Resource(schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource})
		if r.Namespace != "" {
			ri = c.dyn.Resource(schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}).Namespace(r.Namespace)
		}
		if err := ri.Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %s: %w", r.Resource, r.Name, err)
		}
	}
	return os.Remove(releaseFile(name, namespace))
}

func releaseFile(name, namespace string) string {
	return filepath.Join(os.Getenv("HELM_STANDIN_STATE"), namespace+"."+name+".json")
}

func saveRelease(name, namespace string, refs []objectRef) error {
	data, err := json.Marshal(refs)
	if err != nil {
		return err
	}
	return os.WriteFile(releaseFile(name, namespace), data, 0o600)
}

func loadRelease(name, namespace string) ([]objectRef, error) {
	data, err := os.ReadFile(releaseFile(name, namespace))
	if err != nil {
		return nil, fmt.Errorf("release %s in %s: not installed (%w)", name, namespace, err)
	}
	var refs []objectRef
	return refs, json.Unmarshal(data, &refs)
}
