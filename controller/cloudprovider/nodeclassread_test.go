package cloudprovider_test

import (
	"context"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Issue 31 item 6: only NotFound means a NodeClass is gone. Deleting the
// NodeClaim of a monthly server while its NodeClass cannot be read (a
// timeout, a cancelled read) must release nothing and fail, so that
// Karpenter calls Delete again; once the read works the server is kept as
// a spare, its month being paid.
func TestNodeClassReadErrorIsNoDeletedNodeClass(t *testing.T) {
	l := startLight(t, nil)
	claim := l.claim("claim-m", catalog.BillingMonthly)
	got, err := l.p.Create(l.ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.ProviderID = got.Status.ProviderID
	_, id, _ := scaleway.ParseProviderID(got.Status.ProviderID)

	for _, readErr := range []error{errTimeout, context.Canceled, context.DeadlineExceeded} {
		l.failNodeClassReads(readErr)
		// A retried Create whose server is listed: no NodeClaim without
		// the NodeClass's hash, an error to retry.
		if again, err := l.p.Create(l.ctx, claim); err == nil {
			t.Errorf("Create with the nodeclass unreadable (%v) = %v, want an error", readErr, again.Annotations)
		}
		err := l.p.Delete(l.ctx, claim)
		if err == nil || cloudprovider.IsNodeClaimNotFoundError(err) {
			t.Fatalf("Delete with the nodeclass unreadable (%v) = %v, want an error to retry", readErr, err)
		}
		s, _ := l.sim.Server(id)
		if s.Status == string(baremetal.ServerStatusDeleting) || !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagNodeClaim, claim.Name)) {
			t.Fatalf("a failed nodeclass read (%v) released or untagged the monthly server: %s %v", readErr, s.Status, s.Tags)
		}
	}

	l.failNodeClassReads(nil)
	if again, err := l.p.Create(l.ctx, claim); err != nil || again.Annotations[v1alpha1.AnnotationNodeClassHash] == "" {
		t.Fatalf("Create once the nodeclass reads = %v, %v; want the NodeClaim with the nodeclass's hash", again, err)
	}
	if err := l.p.Delete(l.ctx, claim); !cloudprovider.IsNodeClaimNotFoundError(err) {
		t.Fatalf("Delete once the nodeclass reads = %v, want the server kept as a spare", err)
	}
	if s, _ := l.sim.Server(id); s.Status == string(baremetal.ServerStatusDeleting) ||
		!scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
		t.Fatalf("the monthly server was not kept as a spare: %s %v", s.Status, s.Tags)
	}
	if !l.rec.Has("KeptAsSpare") {
		t.Errorf("no KeptAsSpare event: %s", l.rec.Reasons())
	}
}
