package nodeclass_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
)

// nodeClassCRD is the stored CRD of the shared API server.
func (e *env) nodeClassCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := e.kube.Client.Get(e.ctx, types.NamespacedName{Name: apis.CRDs[0].Name}, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// installCRDSchema replaces the stored CRD's schema with schema's.
func (e *env) installCRDSchema(t *testing.T, from *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	crd := e.nodeClassCRD(t)
	crd.Spec.Versions = from.DeepCopy().Spec.Versions
	if err := e.kube.Client.Update(e.ctx, crd); err != nil {
		t.Fatal(err)
	}
}

// rawNodeClass is a NodeClass as a manifest: it carries values the Go types
// cannot hold.
func rawNodeClass(name, minimumLifetime string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "ScalewayElasticMetalNodeClass",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"zones":   []any{"fr-par-2"},
			"image":   map[string]any{"schematicID": strings.Repeat("a", 64), "talosVersion": "v1.12.4"},
			"talos":   map[string]any{"joinSecretRef": map[string]any{"name": "cluster-join", "namespace": "karpenter"}},
			"billing": map[string]any{"periods": []any{"monthly"}, "minimumLifetime": minimumLifetime},
		},
	}}
	return u
}

// The API server refuses a duration the controller cannot decode, and one
// past the bound; what the controller writes back (720h0m0s) still passes.
// Kubelet quantities and thresholds the controller cannot parse are refused
// too (the catalogue would refuse the NodeClass's every instance type).
func TestCRDRefusesDurationsAndQuantitiesTheControllerCannotRead(t *testing.T) {
	e := start(t)
	for _, tc := range []struct{ value, want string }{
		{"3000000h", "spec.billing.minimumLifetime"},
		{"30000h", "at most 26280h"},
		{"1h1h", "spec.billing.minimumLifetime"},
		{"h", "spec.billing.minimumLifetime"},
	} {
		err := e.kube.Client.Create(e.ctx, rawNodeClass("lifetime-refused", tc.value))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("minimumLifetime %q: Create = %v, want a refusal naming %q", tc.value, err, tc.want)
			_ = e.kube.Client.Delete(e.ctx, rawNodeClass("lifetime-refused", ""))
		}
	}
	for i, v := range []string{"720h0m0s", "0s", "2160h", "26280h", "90m"} {
		nc := rawNodeClass("lifetime-ok-"+string(rune('a'+i)), v)
		if err := e.kube.Client.Create(e.ctx, nc); err != nil {
			t.Errorf("minimumLifetime %q refused: %v", v, err)
		}
	}
	for i, tc := range []struct {
		field, value, want string
	}{
		{"kubeReserved", "lots", "spec.kubelet.kubeReserved values are non-negative quantities"},
		{"systemReserved", "-1Gi", "spec.kubelet.systemReserved values are non-negative quantities"},
		{"evictionHard", "-5%", "spec.kubelet.evictionHard values are not negative"},
		{"evictionHard", "ten", "spec.kubelet.evictionHard values are percentages"},
		{"evictionHard", "x%", "spec.kubelet.evictionHard values are percentages"},
		{"kubeReserved", "100m", ""},
		{"systemReserved", "1Gi", ""},
		{"evictionHard", "7.5%", ""},
		{"evictionHard", "100Mi", ""},
	} {
		nc := rawNodeClass("kubelet-"+string(rune('a'+i)), "720h")
		_ = unstructured.SetNestedStringMap(nc.Object, map[string]string{"memory": tc.value}, "spec", "kubelet", tc.field)
		err := e.kube.Client.Create(e.ctx, nc)
		if tc.want == "" && err != nil {
			t.Errorf("kubelet.%s %q refused: %v", tc.field, tc.value, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("kubelet.%s %q: Create = %v, want a refusal saying %q", tc.field, tc.value, err, tc.want)
		}
	}
}

// A NodeClass stored before the CRD refused its minimumLifetime (the old
// pattern let 3000000h through, time.ParseDuration does not) must not stop
// the operator: with the typed cache of every NodeClass failing to decode,
// no controller reading NodeClasses (Karpenter core's included) ever starts.
// The controllers start, the good NodeClass is reconciled, and the bad one is
// not Ready with reason SpecUnreadable and a NotReady event naming the value.
func TestUnreadableNodeClassDoesNotStopTheOthers(t *testing.T) {
	e := start(t)
	tightened := e.nodeClassCRD(t)
	lenient := tightened.DeepCopy()
	billing := lenient.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["billing"]
	lifetime := billing.Properties["minimumLifetime"]
	lifetime.Pattern, lifetime.MinLength, lifetime.MaxLength, lifetime.XValidations = `^([0-9]+(s|m|h))+$`, nil, nil, nil
	billing.Properties["minimumLifetime"] = lifetime
	lenient.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["billing"] = billing
	e.installCRDSchema(t, lenient)
	// The API server takes a moment to serve the new schema.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := e.kube.Client.Create(e.ctx, rawNodeClass("stored-unreadable", "3000000h"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lenient CRD refuses 3000000h: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.installCRDSchema(t, tightened)
	e.nodeClass(t, "readable")

	mgr, err := controllerruntime.NewManager(e.kube.Config, controllerruntime.Options{
		Scheme:                 e.kube.Scheme,
		Logger:                 testlog.New(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true), CacheSyncTimeout: 20 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &nodeclass.StatusController{Kube: mgr.GetClient(), Secrets: e.kube.Client, Images: e.images, Credentials: e.creds,
		DefaultZone: "fr-par-2", ProjectID: controllerProject, Recorder: shared.rec}
	if err := c.Register(e.ctx, mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("the manager did not stop")
		}
	})

	// ready reads a NodeClass's Ready condition as stored (a read that
	// fails, as on a controller that cannot decode it, reads nil).
	ready := func(name string) (*status.Condition, *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
		if err := e.kube.Client.Get(e.ctx, types.NamespacedName{Name: name}, nc); err != nil {
			t.Logf("reading %s: %v", name, err)
			return nil, nc
		}
		return nc.StatusConditions(status.WithObservedOnly()).Get(status.ConditionReady), nc
	}
	deadline = time.Now().Add(90 * time.Second)
	for {
		good, goodNC := ready("readable")
		bad, _ := ready("stored-unreadable")
		if good.IsTrue() && bad.IsFalse() {
			if goodNC.Annotations[v1alpha1.AnnotationNodeClassHash] == "" {
				t.Error("the readable NodeClass has no hash")
			}
			if bad.Reason != nodeclass.ReasonSpecUnreadable || !strings.Contains(bad.Message, "3000000h") {
				t.Errorf("unreadable NodeClass: Ready %s/%s %q, want reason %s naming the value", bad.Status, bad.Reason, bad.Message, nodeclass.ReasonSpecUnreadable)
			}
			break
		}
		select {
		case err := <-stopped:
			t.Fatalf("the operator stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controllers never reconciled: readable Ready=%+v, unreadable Ready=%+v", good, bad)
		}
		time.Sleep(200 * time.Millisecond)
	}
	evs := e.events(t, "stored-unreadable", 1)
	if evs[0].reason != nodeclass.EventNotReady || !strings.Contains(evs[0].message, "spec.billing.minimumLifetime") {
		t.Errorf("event on the unreadable NodeClass: %+v", evs[0])
	}
	// Fixing the value makes it readable again; the hash comes back with it.
	fixed := &unstructured.Unstructured{}
	fixed.SetGroupVersionKind(rawNodeClass("", "").GroupVersionKind())
	if err := e.kube.Client.Get(e.ctx, types.NamespacedName{Name: "stored-unreadable"}, fixed); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"billing":{"minimumLifetime":"8760h"}}}`)
	if err := e.kube.Client.Patch(e.ctx, fixed, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		cond, nc := ready("stored-unreadable")
		if cond.IsTrue() && nc.Annotations[v1alpha1.AnnotationNodeClassHash] != "" {
			if nc.Spec.Billing.MinimumLifetime == nil || nc.Spec.Billing.MinimumLifetime.Duration != 8760*time.Hour {
				t.Errorf("fixed minimumLifetime = %v", nc.Spec.Billing.MinimumLifetime)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fixed NodeClass never became Ready: %+v", cond)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
