package talosgen

import (
	"strings"
	"testing"
)

// A Secret naming no kubernetes-version renders the control plane's kubelet
// (not Talos machinery's default, which may be newer than the cluster), one
// that names it keeps its own, and the default leaves drift alone.
func TestKubeletVersionDefaultsToTheControlPlanes(t *testing.T) {
	j, err := ParseJoinSecret("karpenter/join", bundleSecretData(fixedBundle(t)))
	if err != nil {
		t.Fatal(err)
	}
	fingerprint := j.fingerprint
	j.DefaultKubernetesVersion("v1.34.2")
	if got := j.KubernetesVersion(); got != "1.34.2" {
		t.Fatalf("KubernetesVersion = %q, want the control plane's 1.34.2", got)
	}
	if j.fingerprint != fingerprint {
		t.Error("the control plane's version changed the drift fingerprint: upgrading it would replace every node")
	}
	out, err := Render(j, testNodeClaim("bare-metal-k8s"), NodeSettings{}, testReport(), testNetwork())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.Config), "kubelet:v1.34.2") {
		t.Errorf("rendered kubelet image is not v1.34.2")
	}

	data := bundleSecretData(fixedBundle(t))
	data[KeyKubernetesVersion] = []byte("1.33.1")
	pinned, err := ParseJoinSecret("karpenter/join", data)
	if err != nil {
		t.Fatal(err)
	}
	pinned.DefaultKubernetesVersion("1.34.2")
	if got := pinned.KubernetesVersion(); got != "1.33.1" {
		t.Errorf("KubernetesVersion of a Secret naming 1.33.1 = %q", got)
	}
}
