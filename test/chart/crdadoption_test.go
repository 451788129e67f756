package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/helmrender"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// The CRD chart's release as docs/install.md installs it; the controller
// chart's crds/ copies name it as their owner (`make chart-crds`).
const (
	crdRelease          = "karpenter-scaleway-em-crd"
	crdReleaseNamespace = "karpenter"
)

// helmOwnedCRD is what `make chart-crds` makes of a source CRD for the
// controller chart's crds/: Helm's ownership label and annotations for the
// CRD chart's release, in the CRD's existing metadata.annotations.
func helmOwnedCRD(src []byte) []byte {
	return bytes.Replace(src, []byte("\nmetadata:\n  annotations:\n"), []byte("\nmetadata:\n  labels:\n    app.kubernetes.io/managed-by: Helm\n  annotations:\n"+
		"    meta.helm.sh/release-name: "+crdRelease+"\n    meta.helm.sh/release-namespace: "+crdReleaseNamespace+"\n"), 1)
}

// helmOwnershipError is Helm's rule for a resource a release is about to
// install that already exists (helm.sh/helm/v3 pkg/action, checkOwnership):
// it must carry app.kubernetes.io/managed-by=Helm and the release's name and
// namespace in the meta.helm.sh annotations, or the install fails with
// "invalid ownership metadata" (unless --take-ownership, Helm 3.17+).
func helmOwnershipError(o metav1.Object, release, namespace string) error {
	var errs []string
	if v := o.GetLabels()["app.kubernetes.io/managed-by"]; v != "Helm" {
		errs = append(errs, fmt.Sprintf("label app.kubernetes.io/managed-by is %q, must be Helm", v))
	}
	if v := o.GetAnnotations()["meta.helm.sh/release-name"]; v != release {
		errs = append(errs, fmt.Sprintf("annotation meta.helm.sh/release-name is %q, must be %s", v, release))
	}
	if v := o.GetAnnotations()["meta.helm.sh/release-namespace"]; v != namespace {
		errs = append(errs, fmt.Sprintf("annotation meta.helm.sh/release-namespace is %q, must be %s", v, namespace))
	}
	if len(errs) > 0 {
		return errors.New("invalid ownership metadata: " + strings.Join(errs, "; "))
	}
	return nil
}

// installCRDDir does what Helm does with a chart's crds/ directory at
// install: create each object as written, leave one that exists alone.
func installCRDDir(t *testing.T, k *testenv.Kube, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("crds/: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := helmrender.Objects(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if err := k.Client.Create(t.Context(), o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("crds/%s: %v", filepath.Base(f), err)
			}
		}
	}
}

// installCRDChart does what `helm upgrade --install karpenter-scaleway-em-crd`
// does with its templates: Helm's ownership check on every object that
// exists, then the objects written with the release's metadata.
func installCRDChart(t *testing.T, k *testenv.Kube) error {
	t.Helper()
	objs, err := helmrender.Render(loadChart(t, crdChart), nil, helmrender.Release{Name: crdRelease, Namespace: crdReleaseNamespace, KubeVersion: kubeVersion})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		err := k.Client.Get(t.Context(), client.ObjectKeyFromObject(o), live)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			t.Fatal(err)
		default:
			if err := helmOwnershipError(live, crdRelease, crdReleaseNamespace); err != nil {
				return fmt.Errorf("%s %q exists and cannot be imported into the current release: %w", o.GetKind(), o.GetName(), err)
			}
		}
	}
	for _, o := range objs {
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["app.kubernetes.io/managed-by"] = "Helm"
		o.SetLabels(labels)
		ann := o.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["meta.helm.sh/release-name"], ann["meta.helm.sh/release-namespace"] = crdRelease, crdReleaseNamespace
		o.SetAnnotations(ann)
		if err := apply(t.Context(), k.Client, o, false); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// waitEstablished waits until every CRD is served (Established).
func waitEstablished(t *testing.T, k *testenv.Kube) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var crds apiextensionsv1.CustomResourceDefinitionList
		if err := k.Client.List(ctx, &crds); err != nil {
			return false, err
		}
		if len(crds.Items) < 5 {
			return false, nil
		}
		for _, c := range crds.Items {
			established := false
			for _, cond := range c.Status.Conditions {
				established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("CRDs not established: %v", err)
	}
}

// TestCRDChartAdoptsControllerChartCRDs installs the charts on a real API
// server in both orders a user may take. Controller chart first (its crds/
// create the CRDs), then the CRD chart: Helm's ownership check passes, the
// CRD chart takes the CRDs over, and the NodeClass made in between survives.
// CRD chart first, then the controller chart: its crds/ are skipped.
func TestCRDChartAdoptsControllerChartCRDs(t *testing.T) {
	t.Run("controller chart, then CRD chart", func(t *testing.T) {
		k := testenv.StartKube(t, testenv.KubeOptions{NoKarpenterCRDs: true})
		ctx := t.Context()
		for _, ns := range []string{releaseNS, "kube-system", "kube-node-lease"} {
			if err := k.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		// helm install karpenter-scaleway-em: crds/ first, then the templates.
		installCRDDir(t, k, repoPath(t, controllerChart+"/crds"))
		waitEstablished(t, k)
		applyAll(t, k.Client, mustRender(t, loadChart(t, controllerChart), minimalValues))
		nodeClass := &unstructured.Unstructured{}
		if err := nodeClass.UnmarshalJSON([]byte(`{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"before-adoption"},
			"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}}}}`)); err != nil {
			t.Fatal(err)
		}
		if err := k.Client.Create(ctx, nodeClass); err != nil {
			t.Fatal(err)
		}
		// The rule can refuse: a release of another name or namespace would.
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := k.Client.Get(ctx, client.ObjectKey{Name: "nodepools.karpenter.sh"}, live); err != nil {
			t.Fatal(err)
		}
		if helmOwnershipError(live, crdRelease, "kube-system") == nil || helmOwnershipError(live, "crds", crdReleaseNamespace) == nil {
			t.Fatal("the ownership rule accepts another release: the check below proves nothing")
		}
		// helm upgrade --install karpenter-scaleway-em-crd -n karpenter.
		if err := installCRDChart(t, k); err != nil {
			t.Fatalf("CRD chart after the controller chart: %v (docs/install.md, step 5)", err)
		}
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(nodeClass), nodeClass); err != nil {
			t.Errorf("NodeClass after the CRD chart took its CRD over: %v", err)
		}
		// An upgrade of the CRD chart goes through the same check.
		if err := installCRDChart(t, k); err != nil {
			t.Errorf("CRD chart upgrade: %v", err)
		}
	})

	t.Run("CRD chart, then controller chart", func(t *testing.T) {
		k := testenv.StartKube(t, testenv.KubeOptions{NoKarpenterCRDs: true})
		if err := installCRDChart(t, k); err != nil {
			t.Fatal(err)
		}
		waitEstablished(t, k)
		installCRDDir(t, k, repoPath(t, controllerChart+"/crds"))
		if err := k.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}); err != nil {
			t.Fatal(err)
		}
		applyAll(t, k.Client, mustRender(t, loadChart(t, controllerChart), minimalValues))
		// The templates' copies are still the CRD chart's.
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := k.Client.Get(t.Context(), client.ObjectKey{Name: "scalewayelasticmetalnodeclasses.karpenter-scaleway-em.io"}, live); err != nil {
			t.Fatal(err)
		}
		if err := helmOwnershipError(live, crdRelease, crdReleaseNamespace); err != nil {
			t.Error(err)
		}
	})
}
