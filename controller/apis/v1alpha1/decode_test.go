package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
)

// A list as the API server sends it to the informer: one NodeClass that
// decodes, and one stored before the CRD refused what the controller cannot
// read (a minimumLifetime time.ParseDuration refuses, a failure count past
// int32). The list decodes; the good NodeClass is whole; the bad one keeps
// every value it can and names the others.
const storedList = `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClassList","metadata":{"resourceVersion":"7"},"items":[
 {"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"good","resourceVersion":"5"},
  "spec":{"zones":["fr-par-1"],"image":{"manifestURL":"https://images.example.com/manifest.json"},"talos":{"joinSecretRef":{"name":"join","namespace":"karpenter"}},
   "billing":{"periods":["monthly"],"minimumLifetime":"2160h"}}},
 {"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad","resourceVersion":"6"},
  "spec":{"zones":["nl-ams-1"],"image":{"manifestURL":"https://images.example.com/manifest.json"},"talos":{"joinSecretRef":{"name":"join","namespace":"karpenter"}},
   "billing":{"periods":["monthly"],"minimumLifetime":"3000000h","sparesOnDeletion":"Keep"},"limits":{"hourlySpend":"5"}},
  "status":{"zones":["nl-ams-1"],"installs":{"consecutiveFailures":10000000000,"opened":2}}}
]}`

func TestListDecodesPastAValueTheControllerCannotRead(t *testing.T) {
	list := &ScalewayElasticMetalNodeClassList{}
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(storedList), nil, list); err != nil {
		t.Fatalf("one NodeClass the controller cannot read fails the list (the informer never syncs, the operator stops): %v", err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("%d items, want 2", len(list.Items))
	}
	good, bad := &list.Items[0], &list.Items[1]
	if err := good.Unreadable(); err != nil || good.Spec.Billing.MinimumLifetime == nil ||
		good.Spec.Billing.MinimumLifetime.Duration != 2160*time.Hour {
		t.Errorf("good NodeClass: Unreadable %v, minimumLifetime %v", err, good.Spec.Billing.MinimumLifetime)
	}
	err := bad.Unreadable()
	if err == nil {
		t.Fatal("the bad NodeClass is not reported unreadable")
	}
	for _, want := range []string{"spec.billing.minimumLifetime", "3000000h", "status.installs.consecutiveFailures"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Unreadable() = %q, want it to name %q", err, want)
		}
	}
	if bad.Name != "bad" || bad.ResourceVersion != "6" || bad.Spec.Billing.MinimumLifetime != nil ||
		!bad.Spec.Billing.KeepSparesOnDeletion() || len(bad.Spec.Billing.Periods) != 1 ||
		bad.Spec.Limits == nil || bad.Spec.Limits.HourlySpend != "5" || len(bad.Spec.Zones) != 1 ||
		bad.Spec.Image.ManifestURL == "" || bad.Spec.Talos.JoinSecretRef.Name != "join" ||
		bad.Status.Installs == nil || bad.Status.Installs.Opened != 2 || bad.Status.Installs.ConsecutiveFailures != 0 {
		t.Errorf("the bad NodeClass lost values it could read, or kept one it could not: %+v", bad)
	}
	if bad.DeepCopy().Undecodable == "" {
		t.Error("DeepCopy drops Undecodable: a copy from the cache would look readable")
	}
}

// A stored object that is not a NodeClass at all still fails: there is
// nothing to name it by.
func TestNotAnObjectStillFails(t *testing.T) {
	nc := &ScalewayElasticMetalNodeClass{}
	if err := json.Unmarshal([]byte(`["not","an","object"]`), nc); err == nil {
		t.Error("a JSON list decoded as a NodeClass")
	}
}
